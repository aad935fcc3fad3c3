// capi_test drives librdma.so from C threads, as a C user of rdma_lib.h
// would: a server and clients in pthreads on loopback (127.0.0.1 serves,
// 127.0.0.2 and 127.0.0.3 are clients), send/recv of every size up to the
// buffer, broadcast, all-to-all, and every error with its text, including
// that rdma_get_error() is per thread.
//
// Usage: capi_test [simple_client]   (with the path of examples/c's simple
// client, also runs it against a server on 127.0.0.1:5555)
//
// Exits 0 when every check passed; each failed check prints a line.
#include "rdma_lib.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

_Static_assert(MAX_PEERS == 64, "MAX_PEERS");
_Static_assert(MAX_WR == 128, "MAX_WR");
_Static_assert(CQ_DEPTH == 256, "CQ_DEPTH");
_Static_assert(BUFFER_SIZE == 4096, "BUFFER_SIZE");

static int failures;
static int checks;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        __atomic_add_fetch(&checks, 1, __ATOMIC_SEQ_CST);                 \
        if (!(cond)) {                                                    \
            flockfile(stderr);                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            funlockfile(stderr);                                          \
            __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);           \
        }                                                                 \
    } while (0)

// EXPECT_ERROR: call returned fail_value and this thread's error text
// contains want.
#define EXPECT_ERROR(ret, fail_value, want)                                   \
    do {                                                                      \
        long ret_ = (long)(ret);                                              \
        const char *err_ = rdma_get_error();                                  \
        CHECK(ret_ == (long)(fail_value), "returned %ld, want %ld (error '%s')", \
              ret_, (long)(fail_value), err_);                                \
        CHECK(err_ != NULL && strstr(err_, want) != NULL,                     \
              "error text '%s' lacks '%s'", err_ ? err_ : "(null)", want);    \
    } while (0)

#define EXPECT_OK(ret, want)                                                  \
    do {                                                                      \
        long ret_ = (long)(ret);                                              \
        CHECK(ret_ == (long)(want), "returned %ld, want %ld (error '%s')",    \
              ret_, (long)(want), rdma_get_error());                          \
    } while (0)

#define EXPECT_NOERR(ret)                                                     \
    do {                                                                      \
        long ret_ = (long)(ret);                                              \
        CHECK(ret_ >= 0, "returned %ld (error '%s')", ret_, rdma_get_error()); \
    } while (0)

static int test_port;

// new_server listens on 127.0.0.1 on a free port of its choosing.
static rdma_context *new_server(size_t buf_size) {
    for (int i = 0; i < 100; i++) {
        int port = test_port++;
        rdma_context *ctx = rdma_init("127.0.0.1", port, buf_size, true);
        if (ctx) {
            return ctx;
        }
    }
    CHECK(0, "no free port for a server: %s", rdma_get_error());
    exit(1);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        p[i] = (unsigned char)(seed + i * 7);
    }
}

// ---- arguments, contexts and their errors ------------------------------

static void test_bad_arguments(void) {
    EXPECT_ERROR(rdma_init(NULL, 1, 64, true), NULL, "rdma_init: ip is NULL");
    EXPECT_ERROR(rdma_init("nope", 1, 64, false), NULL, "\"nope\" is not an IP address");
    EXPECT_ERROR(rdma_init("127.0.0.1", 1, 0, true), NULL, "buffer size 0 is not in 1..");
    EXPECT_ERROR(rdma_init("127.0.0.1", 1, (size_t)1 << 40, true), NULL, "buffer size 1099511627776 is too large");
    EXPECT_ERROR(rdma_init("127.0.0.1", 70000, 64, true), NULL, "port 70000");

    char buf[16] = {0};
    rdma_context *nil = NULL;
    EXPECT_ERROR(rdma_connect_peer(nil, "127.0.0.1", 1), -1, "rdma_connect_peer: ctx is NULL");
    EXPECT_ERROR(rdma_accept_peer(nil), -1, "rdma_accept_peer: ctx is NULL");
    EXPECT_ERROR(rdma_disconnect_peer(nil, 0), -1, "rdma_disconnect_peer: ctx is NULL");
    EXPECT_ERROR(rdma_send(nil, 0, buf, 1), -1, "rdma_send: ctx is NULL");
    EXPECT_ERROR(rdma_recv(nil, 0, buf, 1), -1, "rdma_recv: ctx is NULL");
    EXPECT_ERROR(rdma_broadcast(nil, buf, 1), -1, "rdma_broadcast: ctx is NULL");
    EXPECT_ERROR(rdma_sequential_alltoall(nil, buf, buf, 1), -1, "rdma_sequential_alltoall: ctx is NULL");
    rdma_cleanup(NULL); // like free(NULL): nothing happens

    // A pointer that rdma_init never returned.
    rdma_context *bogus = (rdma_context *)(uintptr_t)0x5eed;
    EXPECT_ERROR(rdma_send(bogus, 0, buf, 1), -1, "not a live rdma_context");
    EXPECT_ERROR(rdma_accept_peer(bogus), -1, "not a live rdma_context");

    // A client context: argument errors, and no accepting.
    rdma_context *cl = rdma_init("127.0.0.2", 0, 64, false);
    CHECK(cl != NULL, "client init: %s", rdma_get_error());
    EXPECT_ERROR(rdma_accept_peer(cl), -1, "rdma_accept_peer: accept: not a server context");
    EXPECT_ERROR(rdma_connect_peer(cl, NULL, 1), -1, "peer_ip is NULL");
    EXPECT_ERROR(rdma_connect_peer(cl, "x.y", 1), -1, "\"x.y\" is not an IP address");
    EXPECT_ERROR(rdma_send(cl, 0, buf, 1), -1, "send to peer 0: no such peer (the context has 0 peers)");
    EXPECT_ERROR(rdma_send(cl, 0, NULL, 1), -1, "rdma_send: data is NULL");
    EXPECT_ERROR(rdma_send(cl, 0, buf, 65), -1, "message too long");
    EXPECT_ERROR(rdma_recv(cl, 0, NULL, 1), -1, "rdma_recv: data is NULL");
    EXPECT_ERROR(rdma_recv(cl, -3, buf, 1), -1, "recv from peer -3: no such peer");
    EXPECT_ERROR(rdma_broadcast(cl, NULL, 1), -1, "rdma_broadcast: data is NULL");
    EXPECT_ERROR(rdma_broadcast(cl, buf, 1), -1, "no connected peers");
    EXPECT_ERROR(rdma_sequential_alltoall(cl, NULL, buf, 1), -1, "send_buf is NULL");
    EXPECT_ERROR(rdma_sequential_alltoall(cl, buf, NULL, 1), -1, "recv_buf is NULL");
    EXPECT_ERROR(rdma_sequential_alltoall(cl, buf, buf, 0), -1, "msg_size is 0");
    EXPECT_ERROR(rdma_sequential_alltoall(cl, buf, buf, 1), -1, "no connected peers");
    EXPECT_ERROR(rdma_disconnect_peer(cl, 0), -1, "no such peer");
    rdma_cleanup(cl);
    // Used after cleanup: an error, not a crash.
    EXPECT_ERROR(rdma_send(cl, 0, buf, 1), -1, "already passed to rdma_cleanup");
    rdma_cleanup(cl);
    CHECK(strstr(rdma_get_error(), "rdma_cleanup: ctx is not a live rdma_context") != NULL,
          "double cleanup: '%s'", rdma_get_error());
}

// ---- rdma_get_error is per thread --------------------------------------

#define ERR_THREADS 4
static pthread_barrier_t err_barrier;

static void *error_thread(void *arg) {
    int id = (int)(intptr_t)arg;
    char ip[32], want[48];
    snprintf(ip, sizeof(ip), "bad-ip-%d", id);
    snprintf(want, sizeof(want), "\"bad-ip-%d\" is not an IP address", id);
    for (int round = 0; round < 50; round++) {
        rdma_context *ctx = rdma_init(ip, 1, 64, false);
        CHECK(ctx == NULL, "init of %s succeeded", ip);
        // Every thread sets its error before any thread reads its own.
        pthread_barrier_wait(&err_barrier);
        CHECK(strstr(rdma_get_error(), want) != NULL, "thread %d sees '%s'", id, rdma_get_error());
        pthread_barrier_wait(&err_barrier);
    }
    return NULL;
}

static void test_thread_local_errors(void) {
    pthread_t t[ERR_THREADS];
    pthread_barrier_init(&err_barrier, NULL, ERR_THREADS);
    for (int i = 0; i < ERR_THREADS; i++) {
        pthread_create(&t[i], NULL, error_thread, (void *)(intptr_t)i);
    }
    for (int i = 0; i < ERR_THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    pthread_barrier_destroy(&err_barrier);
}

// ---- a server and two clients in threads -------------------------------

#define STAR_CLIENTS 2
#define MSG 64
#define ROUNDS 20

static int star_port;
static pthread_barrier_t star_barrier; // server + clients

static const size_t sizes[] = {0, 1, 63, 64, 65, 1000, BUFFER_SIZE - 1, BUFFER_SIZE};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void make_block(char *b, int participant, int round) {
    memset(b, 0, MSG);
    snprintf(b, MSG, "participant %d round %d", participant, round);
}

static void check_combined(const char *who, const char *recv, int participants, int round) {
    char want[MSG];
    for (int p = 0; p < participants; p++) {
        make_block(want, p, round);
        CHECK(memcmp(recv + p * MSG, want, MSG) == 0, "%s round %d block %d is '%.*s', want '%s'",
              who, round, p, MSG, recv + p * MSG, want);
    }
}

struct client_arg {
    const char *ip;
    int participant; // told by the server
};

static void *client_thread(void *argp) {
    struct client_arg *arg = argp;
    rdma_context *ctx = rdma_init(arg->ip, 9 /* ignored */, BUFFER_SIZE, false);
    CHECK(ctx != NULL, "client %s init: %s", arg->ip, rdma_get_error());
    if (!ctx) {
        exit(1);
    }
    int srv = rdma_connect_peer(ctx, "127.0.0.1", star_port);
    EXPECT_OK(srv, 0);

    // The server tells each client its participant number.
    int n = rdma_recv(ctx, srv, &arg->participant, sizeof(arg->participant));
    EXPECT_OK(n, sizeof(arg->participant));

    // Every size up to the buffer, both ways: the server echoes.
    unsigned char *out = malloc(BUFFER_SIZE + 1), *in = malloc(BUFFER_SIZE);
    for (size_t i = 0; i < NSIZES; i++) {
        fill(out, sizes[i], (unsigned)(i + arg->participant));
        EXPECT_OK(rdma_send(ctx, srv, out, sizes[i]), sizes[i]);
        memset(in, 0xee, BUFFER_SIZE);
        EXPECT_OK(rdma_recv(ctx, srv, in, BUFFER_SIZE), sizes[i]);
        CHECK(memcmp(in, out, sizes[i]) == 0, "echo of %zu bytes differs", sizes[i]);
    }
    // One byte over the buffer size is refused before anything is sent.
    EXPECT_ERROR(rdma_send(ctx, srv, out, BUFFER_SIZE + 1), -1,
                 "rdma_send: message too long: len 4097 is too large (the limit is 4096)");

    // A message longer than max_len stays queued for a retry.
    EXPECT_ERROR(rdma_recv(ctx, srv, in, 99), -1,
                 "message too long: the 100-byte message does not fit in 99 bytes (it stays queued");
    EXPECT_OK(rdma_recv(ctx, srv, in, 100), 100);
    fill(out, 100, 42);
    CHECK(memcmp(in, out, 100) == 0, "the queued message differs");

    // Broadcast from the server.
    char b[16] = {0};
    EXPECT_OK(rdma_recv(ctx, srv, b, sizeof(b)), 10);
    CHECK(strcmp(b, "broadcast") == 0, "broadcast got '%s'", b);

    // All-to-all, round after round.
    char send[MSG], recv[(STAR_CLIENTS + 1) * MSG];
    for (int round = 0; round < ROUNDS; round++) {
        make_block(send, arg->participant, round);
        memset(recv, 0, sizeof(recv));
        EXPECT_OK(rdma_sequential_alltoall(ctx, send, recv, MSG), 0);
        check_combined(arg->ip, recv, STAR_CLIENTS + 1, round);
    }
    pthread_barrier_wait(&star_barrier); // all-to-all done everywhere

    // Participant 2 leaves; participant 1 then sees a two-party all-to-all.
    if (arg->participant == 2) {
        EXPECT_OK(rdma_disconnect_peer(ctx, srv), 0);
        EXPECT_ERROR(rdma_disconnect_peer(ctx, srv), -1, "disconnect peer 0: peer disconnected");
        EXPECT_ERROR(rdma_send(ctx, srv, b, 1), -1, "send to peer 0: peer disconnected");
        EXPECT_ERROR(rdma_recv(ctx, srv, b, 1), -1, "recv from peer 0: peer disconnected");
        pthread_barrier_wait(&star_barrier); // disconnected
    } else {
        pthread_barrier_wait(&star_barrier);
        make_block(send, 1, 99);
        EXPECT_OK(rdma_sequential_alltoall(ctx, send, recv, MSG), 0);
        check_combined(arg->ip, recv, 2, 99);
    }
    free(out);
    free(in);
    rdma_cleanup(ctx);
    return NULL;
}

static void test_star(void) {
    rdma_context *srv = new_server(BUFFER_SIZE);
    star_port = test_port - 1;
    pthread_barrier_init(&star_barrier, NULL, STAR_CLIENTS + 1);
    struct client_arg args[STAR_CLIENTS] = {{"127.0.0.2", 0}, {"127.0.0.3", 0}};
    pthread_t t[STAR_CLIENTS];
    for (int i = 0; i < STAR_CLIENTS; i++) {
        pthread_create(&t[i], NULL, client_thread, &args[i]);
    }
    for (int i = 0; i < STAR_CLIENTS; i++) {
        EXPECT_OK(rdma_accept_peer(srv), i);
    }
    for (int i = 0; i < STAR_CLIENTS; i++) {
        int participant = i + 1;
        EXPECT_OK(rdma_send(srv, i, &participant, sizeof(participant)), sizeof(participant));
    }
    EXPECT_ERROR(rdma_send(srv, STAR_CLIENTS, "x", 1), -1, "send to peer 2: no such peer (the context has 2 peers)");

    // Echo every size, from each client in turn.
    unsigned char *buf = malloc(BUFFER_SIZE);
    for (size_t i = 0; i < NSIZES; i++) {
        for (int c = 0; c < STAR_CLIENTS; c++) {
            int n = rdma_recv(srv, c, buf, BUFFER_SIZE);
            EXPECT_OK(n, sizes[i]);
            EXPECT_OK(rdma_send(srv, c, buf, n < 0 ? 0 : (size_t)n), sizes[i]);
        }
    }
    fill(buf, 100, 42);
    for (int c = 0; c < STAR_CLIENTS; c++) {
        EXPECT_OK(rdma_send(srv, c, buf, 100), 100);
    }
    EXPECT_OK(rdma_broadcast(srv, "broadcast", 10), 10);

    char send[MSG], recv[(STAR_CLIENTS + 1) * MSG];
    for (int round = 0; round < ROUNDS; round++) {
        make_block(send, 0, round);
        memset(recv, 0, sizeof(recv));
        EXPECT_OK(rdma_sequential_alltoall(srv, send, recv, MSG), 0);
        check_combined("server", recv, STAR_CLIENTS + 1, round);
    }
    // Three 2048-byte blocks do not fit the 4096-byte buffer.
    char big[2048] = {0}, bigrecv[3 * 2048];
    EXPECT_ERROR(rdma_sequential_alltoall(srv, big, bigrecv, sizeof(big)), -1,
                 "3 participants of 2048 bytes make 6144 bytes, more than the buffer size of 4096 bytes");
    pthread_barrier_wait(&star_barrier);

    pthread_barrier_wait(&star_barrier); // participant 2 has disconnected
    EXPECT_ERROR(rdma_recv(srv, 1, buf, BUFFER_SIZE), -1, "recv from peer 1: the peer closed the connection");
    EXPECT_OK(rdma_disconnect_peer(srv, 1), 0);
    make_block(send, 0, 99);
    EXPECT_OK(rdma_sequential_alltoall(srv, send, recv, MSG), 0);
    check_combined("server", recv, 2, 99);

    for (int i = 0; i < STAR_CLIENTS; i++) {
        pthread_join(t[i], NULL);
    }
    pthread_barrier_destroy(&star_barrier);
    free(buf);
    rdma_cleanup(srv);
}

// ---- MAX_PEERS ---------------------------------------------------------

static rdma_context *max_srv;

static void *accept_all(void *arg) {
    (void)arg;
    for (int i = 0; i < MAX_PEERS; i++) {
        EXPECT_OK(rdma_accept_peer(max_srv), i);
    }
    return NULL;
}

static void test_max_peers(void) {
    max_srv = new_server(64);
    int port = test_port - 1;
    rdma_context *cl = rdma_init("127.0.0.2", 0, 64, false);
    CHECK(cl != NULL, "client init: %s", rdma_get_error());
    pthread_t t;
    pthread_create(&t, NULL, accept_all, NULL);
    for (int i = 0; i < MAX_PEERS; i++) {
        EXPECT_OK(rdma_connect_peer(cl, "127.0.0.1", port), i);
    }
    pthread_join(t, NULL);
    EXPECT_ERROR(rdma_connect_peer(cl, "127.0.0.1", port), -1, "too many peers (MAX_PEERS is 64)");
    EXPECT_ERROR(rdma_accept_peer(max_srv), -1, "rdma_accept_peer: accept: too many peers (MAX_PEERS is 64)");
    // All 64 work: a broadcast reaches every one.
    EXPECT_OK(rdma_broadcast(max_srv, "hi", 3), 3);
    for (int i = 0; i < MAX_PEERS; i++) {
        char b[4];
        EXPECT_OK(rdma_recv(cl, i, b, sizeof(b)), 3);
    }
    rdma_cleanup(cl);
    rdma_cleanup(max_srv);
}

// ---- rdma_cleanup unblocks calls blocked in other threads --------------

static rdma_context *blocked_ctx;

// closed_or_gone: a call on a context being cleaned up fails as closed if
// it started first, or finds the context gone if it started after.
static int closed_or_gone(const char *err) {
    return strstr(err, "context closed") != NULL || strstr(err, "not a live rdma_context") != NULL;
}

static void *blocked_accept(void *arg) {
    (void)arg;
    int ret = rdma_accept_peer(blocked_ctx);
    CHECK(ret == -1 && closed_or_gone(rdma_get_error()), "accept returned %d: '%s'", ret, rdma_get_error());
    return NULL;
}

static void *blocked_recv(void *arg) {
    rdma_context *cl = arg;
    char b[8];
    int ret = rdma_recv(cl, 0, b, sizeof(b));
    CHECK(ret == -1 && closed_or_gone(rdma_get_error()), "recv returned %d: '%s'", ret, rdma_get_error());
    return NULL;
}

static void test_cleanup_unblocks(void) {
    blocked_ctx = new_server(64);
    int port = test_port - 1;
    rdma_context *cl = rdma_init("127.0.0.3", 0, 64, false);
    CHECK(cl != NULL, "client init: %s", rdma_get_error());
    EXPECT_OK(rdma_connect_peer(cl, "127.0.0.1", port), 0);
    EXPECT_OK(rdma_accept_peer(blocked_ctx), 0);
    pthread_t a, r;
    pthread_create(&a, NULL, blocked_accept, NULL);
    pthread_create(&r, NULL, blocked_recv, cl);
    usleep(100 * 1000); // most likely both block first; either way they fail cleanly
    rdma_cleanup(cl);
    rdma_cleanup(blocked_ctx);
    pthread_join(a, NULL);
    pthread_join(r, NULL);
}

// ---- the seed's simple client, as a separate program -------------------

static void test_simple_client(const char *path) {
    rdma_context *srv = rdma_init("127.0.0.1", 5555, BUFFER_SIZE, true);
    CHECK(srv != NULL, "server on 127.0.0.1:5555: %s", rdma_get_error());
    if (!srv) {
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        execl(path, path, (char *)NULL);
        _exit(127);
    }
    EXPECT_OK(rdma_accept_peer(srv), 0);
    char b[64] = {0};
    EXPECT_OK(rdma_recv(srv, 0, b, sizeof(b)), 12);
    CHECK(strcmp(b, "Hello RDMA!") == 0, "simple client sent '%s'", b);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "simple client exit status %d", status);
    rdma_cleanup(srv);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_port = 20000 + (int)(getpid() % 20000);
    CHECK(rdma_get_error() != NULL && rdma_get_error()[0] == '\0', "initial error text '%s'", rdma_get_error());

    printf("capi_test: bad arguments\n");
    test_bad_arguments();
    printf("capi_test: per-thread errors\n");
    test_thread_local_errors();
    printf("capi_test: server and two clients\n");
    test_star();
    printf("capi_test: MAX_PEERS\n");
    test_max_peers();
    printf("capi_test: cleanup unblocks other threads\n");
    test_cleanup_unblocks();
    if (argc > 1) {
        printf("capi_test: simple client %s\n", argv[1]);
        test_simple_client(argv[1]);
    }
    if (failures) {
        printf("capi_test: FAILED %d of %d checks\n", failures, checks);
        return 1;
    }
    printf("capi_test: PASS (%d checks)\n", checks);
    return 0;
}
