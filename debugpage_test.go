package rdma_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/rdmadebug"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The debug page over a server's 10,000 connections: pages of 1,000 from
// a start id, each naming the next, cover every one once, as JSON and as
// text; one is found by its id.
func TestDebugPageTenThousandConns(t *testing.T) {
	const n = 10000
	remove := rdma.RegisterFakeConns(n)
	defer remove()
	srv := httptest.NewServer(rdmadebug.Handler())
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	get := func(query string) string {
		resp, err := srv.Client().Get(srv.URL + "/?" + query)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", query, b)
		return string(b)
	}

	var ids []uint64
	start, pages := uint64(0), 0
	for {
		var page struct {
			Conns []struct {
				ID         uint64 `json:"id"`
				Provider   string `json:"provider"`
				RemoteAddr string `json:"remote_addr"`
			} `json:"conns"`
			Next uint64 `json:"next"`
		}
		require.NoError(t, json.Unmarshal([]byte(get(fmt.Sprintf("format=json&limit=1000&start=%d", start))), &page))
		text := get(fmt.Sprintf("limit=1000&start=%d", start))
		require.True(t, strings.HasSuffix(text, "\n"))
		require.LessOrEqual(t, len(page.Conns), 1000)
		pages++
		for _, c := range page.Conns {
			if c.Provider == "fake" {
				ids = append(ids, c.ID)
				require.Contains(t, text, fmt.Sprintf("\n%-6d ESTAB", c.ID), "the text lists conn %d too", c.ID)
			}
		}
		if page.Next == 0 {
			break
		}
		assert.Contains(t, text, fmt.Sprintf("\nnext: ?start=%d&limit=1000\n", page.Next))
		start = page.Next
	}
	require.Len(t, ids, n, "every conn on one page")
	assert.IsIncreasing(t, ids)
	assert.GreaterOrEqual(t, pages, 10)

	one := get(fmt.Sprintf("id=%d", ids[6789]))
	assert.Contains(t, one, fmt.Sprintf("\n%-6d ESTAB", ids[6789]))
	assert.Contains(t, one, "127.0.0.2:16789")
	assert.Equal(t, 7, strings.Count(one, "\n"), "a header, the conn's row and its 5 lines of counters: %s", one)
}
