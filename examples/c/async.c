// async: asynchronous send and receive with rdma_lib.h. A server and two
// clients (pthreads here; processes or hosts in real use) on loopback: the
// server posts a receive on each client at once, then handles whichever
// message comes first with rdma_waitany, while the clients each have a
// batch of sends in flight.
#include "rdma_lib.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PORT 5556
#define CLIENTS 2
#define BATCH 8

static pthread_barrier_t connected;

static void *client(void *arg) {
    int id = (int)(long)arg;
    const char *ip = id == 0 ? "127.0.0.2" : "127.0.0.3";
    rdma_context *ctx = rdma_init(ip, 0, BUFFER_SIZE, false);
    if (!ctx) {
        fprintf(stderr, "client %d: %s\n", id, rdma_get_error());
        exit(1);
    }
    int srv = -1;
    for (int tries = 0; srv < 0 && tries < 100; tries++) {
        srv = rdma_connect_peer(ctx, "127.0.0.1", PORT); // the server may not listen yet
    }
    if (srv < 0) {
        fprintf(stderr, "client %d: %s\n", id, rdma_get_error());
        exit(1);
    }
    pthread_barrier_wait(&connected);
    // A batch of sends in flight; their buffers stay untouched until done.
    char msgs[BATCH][32];
    rdma_request *reqs[BATCH];
    for (int k = 0; k < BATCH; k++) {
        snprintf(msgs[k], sizeof(msgs[k]), "client %d message %d", id, k);
        if (rdma_isend(ctx, srv, msgs[k], strlen(msgs[k]) + 1, &reqs[k]) < 0) {
            fprintf(stderr, "client %d: %s\n", id, rdma_get_error());
            exit(1);
        }
    }
    for (int k = 0; k < BATCH; k++) {
        if (rdma_wait(reqs[k]) < 0) {
            fprintf(stderr, "client %d: %s\n", id, rdma_get_error());
            exit(1);
        }
    }
    char ack[8];
    rdma_recv(ctx, srv, ack, sizeof(ack)); // until the server has all
    rdma_cleanup(ctx);
    return NULL;
}

int main(void) {
    rdma_context *srv = rdma_init("127.0.0.1", PORT, BUFFER_SIZE, true);
    if (!srv) {
        fprintf(stderr, "server: %s\n", rdma_get_error());
        return 1;
    }
    pthread_barrier_init(&connected, NULL, CLIENTS + 1);
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        pthread_create(&t[i], NULL, client, (void *)(long)i);
        if (rdma_accept_peer(srv) != i) {
            fprintf(stderr, "server: %s\n", rdma_get_error());
            return 1;
        }
    }
    pthread_barrier_wait(&connected);

    // One receive posted per client; whichever completes is handled and
    // replaced by the next receive from the same client.
    char bufs[CLIENTS][64];
    rdma_request *reqs[CLIENTS];
    int left[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        left[i] = BATCH;
        if (rdma_irecv(srv, i, bufs[i], sizeof(bufs[i]), &reqs[i]) < 0) {
            fprintf(stderr, "server: %s\n", rdma_get_error());
            return 1;
        }
    }
    for (int got = 0; got < CLIENTS * BATCH; got++) {
        int i;
        if (rdma_waitany(reqs, CLIENTS, &i) < 0) {
            fprintf(stderr, "server: %s\n", rdma_get_error());
            return 1;
        }
        printf("from client %d: %s\n", i, bufs[i]);
        if (--left[i] > 0 && rdma_irecv(srv, i, bufs[i], sizeof(bufs[i]), &reqs[i]) < 0) {
            fprintf(stderr, "server: %s\n", rdma_get_error());
            return 1;
        }
    }
    rdma_broadcast(srv, "done", 5);
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
    }
    rdma_cleanup(srv);
    printf("async: OK, %d messages\n", CLIENTS * BATCH);
    return 0;
}
