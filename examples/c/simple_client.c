#include "rdma_lib.h"
#include <stdio.h>
#include <string.h>

int main() {
    // Initialize client context
    rdma_context *ctx = rdma_init("127.0.0.2", 5555, 4096, false);
    if (!ctx) {
        fprintf(stderr, "Failed to initialize RDMA: %s\n", rdma_get_error());
        return 1;
    }

    // Connect to server
    int server_idx = rdma_connect_peer(ctx, "127.0.0.1", 5555);
    if (server_idx < 0) {
        fprintf(stderr, "Failed to connect: %s\n", rdma_get_error());
        rdma_cleanup(ctx);
        return 1;
    }

    // Send data
    const char *message = "Hello RDMA!";
    if (rdma_send(ctx, server_idx, message, strlen(message) + 1) < 0) {
        fprintf(stderr, "Send failed: %s\n", rdma_get_error());
    }

    // Cleanup
    rdma_cleanup(ctx);
    return 0;
}
