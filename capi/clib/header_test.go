package main

import (
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmanet/rdma/capi"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// originalAPI is the original rdma_lib.h API, which include/rdma_lib.h must
// declare exactly (whitespace aside).
var originalAPI = []string{
	"rdma_context* rdma_init(const char *ip, int port, size_t buf_size, bool is_server);",
	"void rdma_cleanup(rdma_context *ctx);",
	"int rdma_connect_peer(rdma_context *ctx, const char *peer_ip, int peer_port);",
	"int rdma_accept_peer(rdma_context *ctx);",
	"int rdma_disconnect_peer(rdma_context *ctx, int peer_idx);",
	"int rdma_send(rdma_context *ctx, int peer_idx, const void *data, size_t len);",
	"int rdma_recv(rdma_context *ctx, int peer_idx, void *data, size_t max_len);",
	"int rdma_broadcast(rdma_context *ctx, const void *data, size_t len);",
	"int rdma_sequential_alltoall(rdma_context *ctx, const void *send_buf, void *recv_buf, size_t msg_size);",
	"const char* rdma_get_error(void);",
}

// addedAPI is what rdma_lib.h declares beyond the original API.
var addedAPI = []string{
	"int rdma_reconnect_peer(rdma_context *ctx, int peer_idx, const char *peer_ip, int peer_port);",
	"int rdma_accept_peer_at(rdma_context *ctx, int peer_idx);",
	"int rdma_get_errno(void);",
	"int rdma_isend(rdma_context *ctx, int peer_idx, const void *data, size_t len, rdma_request **req);",
	"int rdma_irecv(rdma_context *ctx, int peer_idx, void *data, size_t max_len, rdma_request **req);",
	"int rdma_wait(rdma_request *req);",
	"int rdma_test(rdma_request *req, int *done);",
	"int rdma_waitany(rdma_request **reqs, int count, int *index);",
	"int rdma_group_init(rdma_context *ctx);",
	"int rdma_group_size(rdma_context *ctx);",
	"int rdma_barrier(rdma_context *ctx);",
	"int rdma_bcast(rdma_context *ctx, void *buf, size_t len, int root);",
	"int rdma_allgather(rdma_context *ctx, const void *send_buf, size_t len, void *recv_buf, size_t recv_len);",
	"int rdma_allreduce(rdma_context *ctx, const void *send_buf, void *recv_buf, size_t count, int datatype, int op);",
	"int rdma_reduce(rdma_context *ctx, const void *send_buf, void *recv_buf, size_t count, int datatype, int op, int root);",
	"int rdma_sequential_alltoall_n(rdma_context *ctx, const void *send_buf, void *recv_buf, size_t recv_len, size_t msg_size);",
	"rdma_mem* rdma_alloc(rdma_context *ctx, size_t size);",
	"void* rdma_mem_ptr(rdma_mem *mem);",
	"size_t rdma_mem_size(rdma_mem *mem);",
	"int rdma_free(rdma_mem *mem);",
	"int rdma_expose(rdma_context *ctx, int peer_idx, rdma_mem *mem, size_t offset, size_t len, int access, rdma_desc *desc);",
	"int rdma_unexpose(rdma_context *ctx, const rdma_desc *desc);",
	"int rdma_write(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len);",
	"int rdma_write_notify(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, unsigned int value);",
	"int rdma_read(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len);",
	"int rdma_wait_notify(rdma_context *ctx, int peer_idx, unsigned int *value, int timeout_ms);",
	"int rdma_write_timeout(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, int timeout_ms);",
	"int rdma_write_notify_timeout(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, unsigned int value, int timeout_ms);",
	"int rdma_read_timeout(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, int timeout_ms);",
	"int rdma_iwrite(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, rdma_request **req);",
	"int rdma_iread(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, rdma_request **req);",
	"int rdma_set_tos(rdma_context *ctx, int tos);",
	"int rdma_get_tos(rdma_context *ctx, int peer_idx);",
}

var originalConstants = map[string]string{
	"MAX_PEERS": "64", "MAX_WR": "128", "CQ_DEPTH": "256", "BUFFER_SIZE": "4096",
}

// The header declares the original API unchanged, and what was added.
func TestHeaderDeclaresTheOriginalAPI(t *testing.T) {
	src, err := os.ReadFile("include/rdma_lib.h")
	require.NoError(t, err)
	text := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(src), "")

	var protos []string
	for _, m := range regexp.MustCompile(`(?m)^[a-z][^#\n;]*\([^;]*\);`).FindAllString(text, -1) {
		if strings.HasPrefix(m, "typedef") {
			continue
		}
		protos = append(protos, strings.Join(strings.Fields(m), " "))
	}
	want := append(append([]string(nil), originalAPI...), addedAPI...)
	sort.Strings(want)
	sort.Strings(protos)
	assert.Equal(t, want, protos)

	defines := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^#define\s+([A-Z0-9_]+)\s+(\S+)`).FindAllStringSubmatch(text, -1) {
		if m[1] != "RDMA_LIB_H" {
			defines[m[1]] = m[2]
		}
	}
	for name, value := range originalConstants {
		assert.Equal(t, value, defines[name], name)
		delete(defines, name)
	}
	// Every other constant is an error code, element type or operator, with
	// clib's value.
	wantCodes := map[string]string{}
	for _, c := range errorCodes {
		wantCodes[c.name] = strconv.Itoa(c.code)
	}
	assert.Equal(t, wantCodes, defines)
	assert.Contains(t, text, "#include <stdbool.h>")
	assert.Contains(t, text, "#include <stddef.h>")
	assert.Contains(t, text, "typedef struct rdma_context rdma_context;")
	assert.Contains(t, text, "typedef struct rdma_request rdma_request;")
}

// Every function of the header is exported by this package or errbuf.c.
func TestEveryFunctionIsDefined(t *testing.T) {
	goSrc, err := os.ReadFile("clib.go")
	require.NoError(t, err)
	asyncSrc, err := os.ReadFile("async.go")
	require.NoError(t, err)
	goSrc = append(goSrc, asyncSrc...)
	for _, f := range []string{"onesided.go", "qos.go"} {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		goSrc = append(goSrc, src...)
	}
	cSrc, err := os.ReadFile("errbuf.c")
	require.NoError(t, err)
	for _, proto := range append(append([]string(nil), originalAPI...), addedAPI...) {
		name := regexp.MustCompile(`(rdma_[a-z_]+)\(`).FindStringSubmatch(proto)[1]
		exported := strings.Contains(string(goSrc), "//export "+name+"\n")
		inC := strings.Contains(string(cSrc), name+"(void) {\n")
		assert.True(t, exported != inC, "%s: exported from Go %v, defined in C %v", name, exported, inC)
	}
}

// errorCodes are rdma_lib.h's constants beyond the original ones, with
// clib's values.
var errorCodes = []struct {
	name string
	code int
}{
	{"RDMA_ERR_INVALID", codeInvalid},
	{"RDMA_ERR_BAD_CONTEXT", codeBadContext},
	{"RDMA_ERR_CLOSED", codeClosed},
	{"RDMA_ERR_NOT_SERVER", codeNotServer},
	{"RDMA_ERR_TOO_MANY_PEERS", codeTooManyPeers},
	{"RDMA_ERR_NO_SUCH_PEER", codeNoSuchPeer},
	{"RDMA_ERR_DISCONNECTED", codeDisconnected},
	{"RDMA_ERR_PEER_GONE", codePeerGone},
	{"RDMA_ERR_NO_PEERS", codeNoPeers},
	{"RDMA_ERR_MSG_SIZE", codeMessageSize},
	{"RDMA_ERR_PROTOCOL", codeProtocol},
	{"RDMA_ERR_PEER_CONNECTED", codePeerConnected},
	{"RDMA_ERR_CONNECT", codeConnect},
	{"RDMA_ERR_INTERNAL", codeInternal},
	{"RDMA_ERR_NO_GROUP", codeNoGroup},
	{"RDMA_ERR_GROUP_FAILED", codeGroupFailed},
	{"RDMA_ERR_BUSY", codeBusy},
	{"RDMA_ERR_CANCELED", codeCanceled},
	{"RDMA_ERR_BAD_REQUEST", codeBadRequest},
	{"RDMA_ERR_REMOTE_ACCESS", codeRemoteAccess},
	{"RDMA_ERR_BAD_DESC", codeBadDesc},
	{"RDMA_ERR_TIMEOUT", codeTimeout},
	{"RDMA_ERR_NOT_SUPPORTED", codeNotSupported},
	{"RDMA_ERR_BAD_MEM", codeBadMem},
	{"RDMA_ACCESS_READ", int(capi.AccessRead)},
	{"RDMA_ACCESS_WRITE", int(capi.AccessWrite)},
	{"RDMA_DESC_SIZE", capi.DescSize},
	{"RDMA_NOTIFY_MAX", capi.NotifyValueMax},
	{"RDMA_INT32", typeInt32},
	{"RDMA_INT64", typeInt64},
	{"RDMA_FLOAT", typeFloat},
	{"RDMA_DOUBLE", typeDouble},
	{"RDMA_SUM", opSum},
	{"RDMA_PROD", opProd},
	{"RDMA_MIN", opMin},
	{"RDMA_MAX", opMax},
}
