package collectives

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// launcherVars lists, in order of precedence, the environment variables
// with which launchers give a process its rank and the number of ranks.
var launcherVars = []struct{ launcher, rank, size string }{
	{"collectives", "RDMA_RANK", "RDMA_WORLD_SIZE"},
	{"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
	{"MPICH/Hydra", "PMI_RANK", "PMI_SIZE"},
	{"Slurm", "SLURM_PROCID", "SLURM_NTASKS"},
	{"torchrun", "RANK", "WORLD_SIZE"},
}

// envParams is what JoinFromEnv reads.
type envParams struct {
	rank, size int
	root       string // host:port of rank 0's listener
	local      string // optional: RDMA_LOCAL_ADDR
}

// paramsFromEnv reads rank, size and root address from getenv.
func paramsFromEnv(getenv func(string) string) (envParams, error) {
	var p envParams
	found := false
	for _, v := range launcherVars {
		rs := getenv(v.rank)
		if rs == "" {
			continue
		}
		ss := getenv(v.size)
		if ss == "" {
			return p, fmt.Errorf("%s is set but %s (the number of ranks) is not", v.rank, v.size)
		}
		var err error
		if p.rank, err = strconv.Atoi(rs); err != nil {
			return p, fmt.Errorf("%s=%q: %w", v.rank, rs, err)
		}
		if p.size, err = strconv.Atoi(ss); err != nil {
			return p, fmt.Errorf("%s=%q: %w", v.size, ss, err)
		}
		if p.size < 1 || p.rank < 0 || p.rank >= p.size {
			return p, fmt.Errorf("%s=%d and %s=%d: want 0 <= rank < size", v.rank, p.rank, v.size, p.size)
		}
		found = true
		break
	}
	if !found {
		return p, errors.New("no rank in the environment: set RDMA_RANK and RDMA_WORLD_SIZE, " +
			"or start the processes with mpirun, srun or torchrun")
	}
	p.local = getenv("RDMA_LOCAL_ADDR")
	if p.root = getenv("RDMA_ROOT_ADDR"); p.root != "" {
		return p, nil
	}
	host, port := getenv("MASTER_ADDR"), getenv("MASTER_PORT")
	if host != "" && port != "" {
		p.root = net.JoinHostPort(host, port)
		return p, nil
	}
	if p.size == 1 {
		return p, nil // a group of one needs no network
	}
	return p, errors.New("no root address in the environment: set RDMA_ROOT_ADDR=host:port " +
		"(or MASTER_ADDR and MASTER_PORT) on every rank to the address where rank 0 listens")
}
