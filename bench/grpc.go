package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

// rawCodec carries a message as its bytes (*[]byte), so that the bench
// needs no generated code.
type rawCodec struct{}

const rawCodecName = "benchraw"

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T is not *[]byte", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T is not *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return rawCodecName }

func init() { encoding.RegisterCodec(rawCodec{}) }

// echoService echoes: Unary returns its request, Stream each message.
var echoService = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var b []byte
		if err := dec(&b); err != nil {
			return nil, err
		}
		return &b, nil
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, ClientStreams: true, Handler: func(_ any, st grpc.ServerStream) error {
		var b []byte
		for {
			if err := st.RecvMsg(&b); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if err := st.SendMsg(&b); err != nil {
				return err
			}
		}
	}}},
}

func serveGRPC(ln net.Listener) (func() error, error) {
	srv := grpc.NewServer()
	srv.RegisterService(&echoService, struct{}{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	return func() error {
		srv.Stop()
		return <-done
	}, nil
}

// grpcClient is one ClientConn (one HTTP/2 connection) to addr.
func grpcClient(t *transport, addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return t.dial(ctx, a) }),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(rawCodecName)))
}

// grpcUnaryWorkload: rpcs concurrent unary calls of size bytes on one
// ClientConn; every reply must equal its request.
func grpcUnaryWorkload(name string, size, rpcs int) workload {
	return workload{name: name, service: "grpc", prepare: func(ctx context.Context, sc scale, t *transport, addr string) (*measure, error) {
		cc, err := grpcClient(t, addr)
		if err != nil {
			return nil, err
		}
		return &measure{
			workers: rpcs,
			close:   cc.Close,
			run: func(ctx context.Context, w int, until time.Time, lat []time.Duration) (int64, []time.Duration, error) {
				req := make([]byte, size)
				for i := 16; i < size; i++ {
					req[i] = byte(w + i)
				}
				var resp []byte
				return echoLoop(w, req, until, lat, "unary reply", func() ([]byte, error) {
					err := cc.Invoke(ctx, "/bench.Echo/Unary", &req, &resp)
					return resp, err
				})
			},
		}, nil
	}}
}

// grpcStreamWorkload: streams bidirectional streams on one ClientConn,
// each sending a message and reading its echo in turn.
func grpcStreamWorkload(name string, size, streams int) workload {
	return workload{name: name, service: "grpc", prepare: func(ctx context.Context, sc scale, t *transport, addr string) (*measure, error) {
		cc, err := grpcClient(t, addr)
		if err != nil {
			return nil, err
		}
		return &measure{
			workers: streams,
			close:   cc.Close,
			run: func(ctx context.Context, w int, until time.Time, lat []time.Duration) (int64, []time.Duration, error) {
				sctx, cancel := context.WithCancel(ctx)
				defer cancel()
				st, err := cc.NewStream(sctx, &echoService.Streams[0], "/bench.Echo/Stream")
				if err != nil {
					return 0, lat, err
				}
				req := make([]byte, size)
				for i := 16; i < size; i++ {
					req[i] = byte(w * i)
				}
				var resp []byte
				ops, lat, err := echoLoop(w, req, until, lat, "stream reply", func() ([]byte, error) {
					if err := st.SendMsg(&req); err != nil {
						return nil, err
					}
					err := st.RecvMsg(&resp)
					return resp, err
				})
				if err != nil {
					return ops, lat, err
				}
				if err := st.CloseSend(); err != nil {
					return ops, lat, err
				}
				if err := st.RecvMsg(&resp); !errors.Is(err, io.EOF) {
					return ops, lat, fmt.Errorf("stream end: %v, want EOF", err)
				}
				return ops, lat, nil
			},
		}, nil
	}}
}
