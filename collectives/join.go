package collectives

import (
	"context"
	"net"
	"os"

	"github.com/rdmanet/rdma"
)

// Join makes this process rank rank of a group of size ranks whose rank 0
// listens at rootAddr ("host:port"), connected pairwise by rdma conns made
// with cfg (nil: defaults). It is Bootstrap{Config: cfg}.Join: the job
// secret, if any, comes from RDMA_JOB_SECRET.
//
// Every rank calls Join with the same size and rootAddr. Rank 0 listens at
// rootAddr; every other rank dials it, listens on an ephemeral port of the
// address its conn to the root leaves from, and says so; rank 0 sends every
// rank the table of addresses; each rank i > 0 then dials every rank j > i.
// Join returns once every rank has all its conns (it ends with a barrier).
// ctx bounds the whole bootstrap: without a deadline, Join waits as long as
// it takes every rank to arrive. A listener busy with the handshakes of
// others (silent conns included) delays a rank, which dials it again, and
// never fails it (see the package documentation).
func Join(ctx context.Context, rank, size int, rootAddr string, cfg *rdma.Config) (*Group, error) {
	b := Bootstrap{Config: cfg}
	return b.Join(ctx, rank, size, rootAddr)
}

// JoinFromEnv is Join with rank, size and root address taken from the
// environment, as launchers set it:
//
//   - rank and size: RDMA_RANK and RDMA_WORLD_SIZE; else Open MPI's
//     OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE; else MPICH's PMI_RANK and
//     PMI_SIZE; else Slurm's SLURM_PROCID and SLURM_NTASKS; else torchrun's
//     RANK and WORLD_SIZE;
//   - root address: RDMA_ROOT_ADDR (host:port), else torchrun's MASTER_ADDR
//     and MASTER_PORT. mpirun and srun do not provide one: set RDMA_ROOT_ADDR.
//   - RDMA_LOCAL_ADDR, optional: the IP this rank listens on and dials from.
//   - RDMA_JOB_SECRET, optional but wanted wherever others can reach the
//     root: the job secret (see Bootstrap.Secret).
//
// A missing or malformed variable is an error that says what to set.
func JoinFromEnv(ctx context.Context, cfg *rdma.Config) (*Group, error) {
	p, err := paramsFromEnv(os.Getenv)
	if err != nil {
		return nil, joinError(-1, err)
	}
	b := Bootstrap{Config: cfg, LocalAddr: p.local}
	return b.Join(ctx, p.rank, p.size, p.root)
}

// Bootstrap holds the options of a Join.
type Bootstrap struct {
	// Config tunes the rdma conns; nil means defaults.
	Config *rdma.Config
	// LocalAddr is the IP this rank listens on and dials from; "" means
	// the address its conn to the root leaves from.
	LocalAddr string
	// TCP carries the group over kernel TCP instead of rdma conns (to
	// compare the two, or where RDMA is not wanted); Config is then unused.
	TCP bool
	// Secret is the job secret every rank must hold to join; nil means the
	// value of the environment variable RDMA_JOB_SECRET (SecretEnv). A rank
	// proves it knows the secret by an HMAC over a nonce of the side it
	// connects to, which proves it back; the secret never crosses the wire.
	// Without one (nil and the variable unset or empty) any process that
	// reaches the root can claim a rank.
	Secret []byte
}

// SecretEnv is the environment variable that holds the job secret when
// Bootstrap.Secret is nil. Whoever launches the job sets it once for every
// rank (cmd/rdmarun makes up a random one by itself).
const SecretEnv = "RDMA_JOB_SECRET"

// Join is the package function Join with b's options.
func (b *Bootstrap) Join(ctx context.Context, rank, size int, rootAddr string) (*Group, error) {
	tr := tcpTransport
	if !b.TCP {
		tr = rdmaTransport(b.Config)
	}
	secret := b.Secret
	if secret == nil {
		secret = []byte(os.Getenv(SecretEnv))
	}
	return join(ctx, tr, secret, rank, size, rootAddr, b.LocalAddr)
}

// linkRing is the ring and send buffer a group's conn may grow to when
// the caller's Config leaves them unset (rdma.Config's default is 1 MiB):
// a collective's blocks are megabytes, and a link that streams them
// stalls less often with room for 2 MiB in flight. Between two namespace
// hosts AllToAll and AllReduce of 4 and 16 MiB took 0.93-0.98 of their
// time with 1 MiB (4 alternated rounds). Only a link that streams grows.
const linkRing = 2 << 20

// linkConfig is the Config of a group's conns: cfg's, with linkRing where
// it leaves the ring or the send buffer unset. cfg itself is not changed.
func linkConfig(cfg *rdma.Config) *rdma.Config {
	c := rdma.Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.RingSize == 0 {
		c.RingSize = linkRing
	}
	if c.SendBufferSize == 0 {
		c.SendBufferSize = linkRing
	}
	return &c
}

func rdmaTransport(cfg *rdma.Config) transport {
	cfg = linkConfig(cfg)
	return transport{
		listen: func(ctx context.Context, addr string) (net.Listener, error) {
			lc := rdma.ListenConfig{Config: cfg}
			return lc.Listen(ctx, rdma.Network, addr)
		},
		dial: func(ctx context.Context, local, addr string) (net.Conn, error) {
			d := rdma.Dialer{Config: cfg}
			if local != "" {
				d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
			}
			return d.DialContext(ctx, rdma.Network, addr)
		},
	}
}
