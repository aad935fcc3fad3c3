// onesided: one-sided RDMA write and read with rdma_lib.h. A server and a
// client (pthreads here; processes or hosts in real use) on loopback. The
// server allocates registered memory, exposes one range to the client for
// writing and another for reading, and sends the client their descriptors.
// The client then writes into the first range and reads the second with no
// work on the server's side, except that its last write notifies the
// server, which then finds the bytes in its memory.
#include "rdma_lib.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PORT 5557
#define SIZE 65536
#define CHUNKS 8

static void die(const char *who) {
    fprintf(stderr, "onesided: %s: %s (code %d)\n", who, rdma_get_error(), rdma_get_errno());
    exit(1);
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + (i >> 9)); }

static void *client(void *arg) {
    (void)arg;
    rdma_context *ctx = rdma_init("127.0.0.2", 0, BUFFER_SIZE, false);
    if (!ctx) {
        die("client init");
    }
    int srv = -1;
    for (int tries = 0; srv < 0 && tries < 100; tries++) {
        srv = rdma_connect_peer(ctx, "127.0.0.1", PORT); // the server may not listen yet
    }
    if (srv < 0) {
        die("connect");
    }
    rdma_desc board, notice;
    if (rdma_recv(ctx, srv, &board, sizeof(board)) != sizeof(board) ||
        rdma_recv(ctx, srv, &notice, sizeof(notice)) != sizeof(notice)) {
        die("receive the descriptors");
    }
    rdma_mem *mem = rdma_alloc(ctx, SIZE);
    if (!mem) {
        die("alloc");
    }
    unsigned char *p = rdma_mem_ptr(mem);
    for (size_t i = 0; i < SIZE; i++) {
        p[i] = pattern(i);
    }
    // CHUNKS writes in flight at once, then the last chunk with a
    // notification: RDMA writes on one connection land in order, so when
    // the server is notified, all of it is there.
    size_t chunk = SIZE / CHUNKS;
    rdma_request *reqs[CHUNKS - 1];
    for (int k = 0; k < CHUNKS - 1; k++) {
        if (rdma_iwrite(ctx, srv, &board, k * chunk, mem, k * chunk, chunk, &reqs[k]) < 0) {
            die("iwrite");
        }
    }
    for (int k = 0; k < CHUNKS - 1; k++) {
        if (rdma_wait(reqs[k]) < 0) {
            die("wait");
        }
    }
    size_t last = (CHUNKS - 1) * chunk;
    if (rdma_write_notify(ctx, srv, &board, last, mem, last, chunk, 42) < 0) {
        die("write_notify");
    }
    // Read the server's notice.
    int n = rdma_read(ctx, srv, &notice, 0, mem, 0, 64);
    if (n < 0) {
        die("read");
    }
    printf("client: read the notice: '%s'\n", (char *)p);
    // The notice is exposed for reading only: writing it is refused here,
    // before anything is sent.
    if (rdma_write(ctx, srv, &notice, 0, mem, 0, 8) >= 0 || rdma_get_errno() != RDMA_ERR_BAD_DESC) {
        fprintf(stderr, "onesided: a write to a read-only range was not refused\n");
        exit(1);
    }
    printf("client: writing the notice: %s\n", rdma_get_error());
    char done[4];
    if (rdma_recv(ctx, srv, done, sizeof(done)) < 0) {
        die("recv");
    }
    rdma_free(mem);
    rdma_cleanup(ctx);
    return NULL;
}

int main(void) {
    rdma_context *ctx = rdma_init("127.0.0.1", PORT, BUFFER_SIZE, true);
    if (!ctx) {
        die("server init");
    }
    pthread_t t;
    pthread_create(&t, NULL, client, NULL);
    int peer = rdma_accept_peer(ctx);
    if (peer < 0) {
        die("accept");
    }
    rdma_mem *board = rdma_alloc(ctx, SIZE);
    rdma_mem *notice = rdma_alloc(ctx, 4096);
    if (!board || !notice) {
        die("alloc");
    }
    strcpy(rdma_mem_ptr(notice), "the board takes 64 KiB");
    rdma_desc bd, nd;
    if (rdma_expose(ctx, peer, board, 0, SIZE, RDMA_ACCESS_WRITE, &bd) < 0 ||
        rdma_expose(ctx, peer, notice, 0, 4096, RDMA_ACCESS_READ, &nd) < 0) {
        die("expose");
    }
    if (rdma_send(ctx, peer, &bd, sizeof(bd)) < 0 || rdma_send(ctx, peer, &nd, sizeof(nd)) < 0) {
        die("send the descriptors");
    }
    unsigned int value = 0;
    int n = rdma_wait_notify(ctx, peer, &value, 10000);
    if (n < 0) {
        die("wait_notify");
    }
    const unsigned char *p = rdma_mem_ptr(board);
    for (size_t i = 0; i < SIZE; i++) {
        if (p[i] != pattern(i)) {
            fprintf(stderr, "onesided: byte %zu of the board is %d, want %d\n", i, p[i], pattern(i));
            return 1;
        }
    }
    printf("server: notified (value %u, %d bytes); the board holds all %d bytes\n", value, n, SIZE);
    if (rdma_send(ctx, peer, "ok", 3) < 0) {
        die("send");
    }
    pthread_join(t, NULL);
    rdma_unexpose(ctx, &bd);
    rdma_free(board);
    rdma_free(notice);
    rdma_cleanup(ctx);
    printf("onesided: OK, %d bytes written one-sided and checked\n", SIZE);
    return 0;
}
