package rdma

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	mrand "math/rand"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// hashicorp/yamux, unchanged, over one Conn: 32 streams, 1 MiB each way.
func TestYamux(t *testing.T) {
	c, s := pair(t, nil)
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	client, err := yamux.Client(c, cfg)
	require.NoError(t, err)
	defer client.Close()
	server, err := yamux.Server(s, cfg)
	require.NoError(t, err)
	defer server.Close()

	const streams, size = 32, 1 << 20
	var wg sync.WaitGroup
	// Server: echo every byte of every stream back, reversed in direction.
	go func() {
		for {
			st, err := server.Accept()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				io.Copy(st, st)
			}()
		}
	}()
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st, err := client.Open()
			if !assert.NoError(t, err) {
				return
			}
			defer st.Close()
			want := make([]byte, size)
			mrand.New(mrand.NewSource(int64(i))).Read(want)
			go func() {
				st.Write(want)
			}()
			got := make([]byte, size)
			if _, err := io.ReadFull(st, got); assert.NoError(t, err) {
				assert.True(t, bytes.Equal(want, got), "stream %d", i)
			}
		}(i)
	}
	wg.Wait()
}

// net/http: a server on the Listener, a client through DialContext.
func TestHTTP(t *testing.T) {
	ln := listen(t, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		// HTTP/1 handlers are half-duplex: read the body, then answer.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(body)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	d := &Dialer{Config: testConfig()}
	tr := &http.Transport{DialContext: d.DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for i := 0; i < 20; i++ {
		body := bytes.Repeat([]byte{byte(i)}, 1000*i+1)
		resp, err := client.Post("http://"+ln.Addr().String()+"/echo", "application/octet-stream", bytes.NewReader(body))
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.True(t, bytes.Equal(body, got), "request %d: sent %d bytes, got %d back", i, len(body), len(got))
	}
}

// gRPC: the health service, over the Listener and grpc.WithContextDialer.
func TestGRPC(t *testing.T) {
	ln := listen(t, nil)
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("rdma", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	defer srv.Stop()

	d := &Dialer{Config: testConfig()}
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "rdma", addr)
		}))
	require.NoError(t, err)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)
	for i := 0; i < 10; i++ {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "rdma"})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.Status)
	}
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"})
	assert.Error(t, err)
}

// crypto/tls over a Conn, with a certificate made here.
func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	c, s := pair(t, nil)
	srv := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{cert}})
	cli := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "rdma.test"})
	defer srv.Close()
	defer cli.Close()
	go func() {
		io.Copy(srv, srv)
	}()
	msg := bytes.Repeat([]byte("secret "), 100000)
	go cli.Write(msg)
	got := make([]byte, len(msg))
	_, err := io.ReadFull(cli, got)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(msg, got))
	assert.Equal(t, uint16(tls.VersionTLS13), cli.ConnectionState().Version)
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rdma.test"},
		DNSNames:              []string{"rdma.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
