// capi_bench times a 64-byte send/recv round trip through librdma.so: a
// server thread echoes what a client thread sends, on loopback.
//
// Usage: capi_bench ITERATIONS [MSG_SIZE]
// Prints: "ns/op N ns/call M" (nanoseconds per round trip, and per call of
// a function that crosses the C boundary and does no I/O) and exits 0, or
// an error.
#include "rdma_lib.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long iterations;
static size_t msg_size = 64;
static rdma_context *srv;

static void die(const char *what) {
    fprintf(stderr, "capi_bench: %s: %s\n", what, rdma_get_error());
    exit(1);
}

static void *echo(void *arg) {
    (void)arg;
    char buf[BUFFER_SIZE];
    if (rdma_accept_peer(srv) != 0) die("accept");
    for (long i = 0; i < iterations + 1; i++) {
        int n = rdma_recv(srv, 0, buf, sizeof(buf));
        if (n < 0) die("server recv");
        if (rdma_send(srv, 0, buf, (size_t)n) < 0) die("server send");
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: capi_bench ITERATIONS [MSG_SIZE]\n");
        return 2;
    }
    iterations = atol(argv[1]);
    if (argc > 2) msg_size = (size_t)atol(argv[2]);
    if (iterations < 1 || msg_size < 1 || msg_size > BUFFER_SIZE) {
        fprintf(stderr, "capi_bench: bad arguments\n");
        return 2;
    }
    int port = 0;
    for (int i = 0; i < 100 && !srv; i++) {
        port = 40000 + (int)((getpid() + i) % 20000);
        srv = rdma_init("127.0.0.1", port, BUFFER_SIZE, true);
    }
    if (!srv) die("server init");
    pthread_t t;
    pthread_create(&t, NULL, echo, NULL);

    rdma_context *cl = rdma_init("127.0.0.2", 0, BUFFER_SIZE, false);
    if (!cl) die("client init");
    if (rdma_connect_peer(cl, "127.0.0.1", port) != 0) die("connect");
    char out[BUFFER_SIZE], in[BUFFER_SIZE];
    memset(out, 'x', sizeof(out));
    // One warm-up round trip, untimed.
    if (rdma_send(cl, 0, out, msg_size) < 0 || rdma_recv(cl, 0, in, sizeof(in)) < 0) die("warm-up");

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < iterations; i++) {
        if (rdma_send(cl, 0, out, msg_size) < 0) die("client send");
        if (rdma_recv(cl, 0, in, sizeof(in)) != (int)msg_size) die("client recv");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, NULL);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);

    // The cost of crossing the boundary alone: a call that does no I/O
    // (a context lookup and an atomic load in Go), from this C thread.
    long calls = iterations * 4 > 100000 ? iterations * 4 : 100000;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < calls; i++) {
        if (rdma_get_tos(cl, -1) != 0) die("get_tos");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double call_ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / (double)calls;
    printf("ns/op %.1f ns/call %.1f\n", ns / (double)iterations, call_ns);
    rdma_cleanup(cl);
    rdma_cleanup(srv);
    return 0;
}
