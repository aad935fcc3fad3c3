package conntest

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

// What people run over a net.Conn, unchanged.

func init() {
	register(testYamux, testHTTP, testGRPC, testTLS)
}

// hashicorp/yamux over one conn: many streams, each echoed and checked.
func testYamux(t *testing.T, s *suite) {
	c, sv := s.pair(t, nil)
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	if s.cfg.Small {
		cfg.ConnectionWriteTimeout = time.Minute // an emulated machine is slow
	}
	client, err := yamux.Client(c, cfg)
	require.NoError(t, err)
	defer client.Close()
	server, err := yamux.Server(sv, cfg)
	require.NoError(t, err)
	defer server.Close()
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

	streams, size := s.scale(16, 2), s.scale(512<<10, 4)
	var wg sync.WaitGroup
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
			go st.Write(want)
			got := make([]byte, size)
			if _, err := io.ReadFull(st, got); assert.NoError(t, err) {
				assert.True(t, bytes.Equal(want, got), "stream %d", i)
			}
		}(i)
	}
	wg.Wait()
}

// net/http: a server on the listener, a client through DialContext asking
// for "tcp" as http.Transport always does.
func testHTTP(t *testing.T, s *suite) {
	ln := s.listen(t, nil)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// HTTP/1 handlers are half-duplex: read the body, then answer.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(bytes.ToUpper(body))
	})}
	go srv.Serve(ln)
	defer srv.Close()

	cfg := s.rdma(nil)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return s.stack.Dial(ctx, cfg, addr, time.Minute)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	for i := 0; i < s.scale(20, 4); i++ {
		body := bytes.Repeat([]byte{'a' + byte(i%26)}, 1000*i+1)
		resp, err := client.Post("http://"+ln.Addr().String()+"/", "application/octet-stream", bytes.NewReader(body))
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.True(t, bytes.Equal(bytes.ToUpper(body), got), "request %d: sent %d bytes, got %d back", i, len(body), len(got))
	}
}

// gRPC: the health service over the listener and grpc.WithContextDialer.
func testGRPC(t *testing.T, s *suite) {
	ln := s.listen(t, nil)
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("rdma", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	defer srv.Stop()

	cfg := s.rdma(nil)
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return s.stack.Dial(ctx, cfg, addr, 0)
		}))
	require.NoError(t, err)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)
	for i := 0; i < s.scale(10, 3); i++ {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "rdma"})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.Status)
	}
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"})
	assert.Error(t, err)
}

// crypto/tls over a conn, with a certificate made here: TLS 1.3, and the
// plaintext echoed whole.
func testTLS(t *testing.T, s *suite) {
	cert, pool := selfSigned(t)
	c, sv := s.pair(t, nil)
	srv := tls.Server(sv, &tls.Config{Certificates: []tls.Certificate{cert}})
	cli := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "rdma.test"})
	defer srv.Close()
	defer cli.Close()
	go io.Copy(srv, srv)
	msg := bytes.Repeat([]byte("secret "), s.scale(100000, 8))
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
