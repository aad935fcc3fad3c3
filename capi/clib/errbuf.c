// The error text of rdma_get_error, one buffer per thread, as the original API
// promises: a failing call sets the text of the thread that made it.
//
// This lives in its own file because a cgo preamble in a file with //export
// directives may hold declarations only.

#include <stddef.h>
#include <string.h>

#define RDMA_ERROR_MAX 1024

static __thread char rdma_error_text[RDMA_ERROR_MAX];
static __thread int rdma_error_code;

// rdma_set_error copies len bytes of msg (not NUL-terminated) as the calling
// thread's error text, truncated to fit, and sets its error code. Hidden: not part of librdma's ABI.
__attribute__((visibility("hidden")))
void rdma_set_error(const char *msg, size_t len, int code) {
    rdma_error_code = code;
    if (len >= RDMA_ERROR_MAX) {
        len = RDMA_ERROR_MAX - 1;
    }
    if (len > 0) {
        memcpy(rdma_error_text, msg, len);
    }
    rdma_error_text[len] = '\0';
}

const char *rdma_get_error(void) {
    return rdma_error_text;
}

int rdma_get_errno(void) {
    return rdma_error_code;
}
