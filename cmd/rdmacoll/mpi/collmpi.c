/*
 * collmpi: the Open MPI side of rdmacoll's comparison. It times
 * MPI_Allreduce (float sums), MPI_Bcast (root 0), MPI_Allgather and
 * MPI_Alltoall exactly as rdmacoll times the collectives package: for each
 * operation and size, -iters runs after -warmup runs, each started by
 * MPI_Barrier, the slowest rank's time of each run (a MAX reduction of the
 * per-run times afterwards), the median printed by rank 0 in rdmacoll's
 * columns. Sizes follow nccl-tests (allgather: the gathered result;
 * alltoall: each rank's send buffer); -check verifies every element with
 * the same patterns.
 *
 *   mpicc -O2 -o collmpi collmpi.c
 *   mpirun -n 2 ./collmpi [-sizes 4K,256K,4M,16M] [-ops allreduce,...] [-iters 20] [-warmup 3] [-check]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;

static long parse_size(const char *s) {
	char *end;
	long v = strtol(s, &end, 10);
	if (*end == 'K') v <<= 10;
	else if (*end == 'M') v <<= 20;
	else if (*end == 'G') v <<= 30;
	return v;
}

static int cmp_double(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static long effective_size(const char *op, long size) {
	if (!strcmp(op, "allreduce")) return size < 4 ? 4 : size / 4 * 4;
	if (!strcmp(op, "allgather") || !strcmp(op, "alltoall")) {
		long unit = 4L * nranks;
		return size < unit ? unit : size / unit * unit;
	}
	return size;
}

static double bus_factor(const char *op) {
	if (!strcmp(op, "allreduce")) return 2.0 * (nranks - 1) / nranks;
	if (!strcmp(op, "broadcast")) return 1.0;
	return (double)(nranks - 1) / nranks;
}

static void prepare(const char *op, long size, int it, void *sendv, void *recvv) {
	unsigned char *send = sendv, *recv = recvv;
	if (!strcmp(op, "allreduce")) {
		float *s = sendv, *r = recvv;
		for (long i = 0; i < size / 4; i++) s[i] = (float)((rank + 1) * ((i + it) % 13 + 1));
		memset(r, 0, size);
	} else if (!strcmp(op, "broadcast")) {
		if (rank == 0) for (long i = 0; i < size; i++) recv[i] = (unsigned char)(i * 7 + it);
		else memset(recv, 0, size);
	} else if (!strcmp(op, "allgather")) {
		long blk = size / nranks;
		for (long i = 0; i < blk; i++) send[i] = (unsigned char)(i + 31 * rank + it);
		memset(recv, 0, size);
	} else {
		long blk = size / nranks;
		for (long i = 0; i < size; i++) send[i] = (unsigned char)(i % blk + 31 * rank + 7 * (i / blk) + it);
		memset(recv, 0, size);
	}
}

static int verify(const char *op, long size, int it, const void *recvv) {
	const unsigned char *recv = recvv;
	if (!strcmp(op, "allreduce")) {
		const float *r = recvv;
		int tri = nranks * (nranks + 1) / 2;
		for (long i = 0; i < size / 4; i++)
			if (r[i] != (float)(tri * ((i + it) % 13 + 1))) return 0;
	} else if (!strcmp(op, "broadcast")) {
		for (long i = 0; i < size; i++)
			if (recv[i] != (unsigned char)(i * 7 + it)) return 0;
	} else {
		long blk = size / nranks;
		int alltoall = !strcmp(op, "alltoall");
		for (long i = 0; i < size; i++) {
			long from = i / blk, k = i % blk;
			unsigned char want = alltoall ? (unsigned char)(k + 31 * from + 7 * rank + it)
			                              : (unsigned char)(k + 31 * from + it);
			if (recv[i] != want) return 0;
		}
	}
	return 1;
}

static void run_op(const char *op, long size, void *send, void *recv) {
	if (!strcmp(op, "allreduce"))
		MPI_Allreduce(send, recv, (int)(size / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	else if (!strcmp(op, "broadcast"))
		MPI_Bcast(recv, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
	else if (!strcmp(op, "allgather"))
		MPI_Allgather(send, (int)(size / nranks), MPI_BYTE, recv, (int)(size / nranks), MPI_BYTE, MPI_COMM_WORLD);
	else
		MPI_Alltoall(send, (int)(size / nranks), MPI_BYTE, recv, (int)(size / nranks), MPI_BYTE, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
	const char *ops = "allreduce,broadcast,allgather,alltoall", *sizes = "4K,256K,4M,16M";
	int iters = 20, warmup = 3, check = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-ops") && i + 1 < argc) ops = argv[++i];
		else if (!strcmp(argv[i], "-sizes") && i + 1 < argc) sizes = argv[++i];
		else if (!strcmp(argv[i], "-iters") && i + 1 < argc) iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-check")) check = 1;
		else {
			if (rank == 0) fprintf(stderr, "collmpi: unknown argument %s\n", argv[i]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (iters < 1) iters = 1;
	double *times = calloc(iters, sizeof *times), *slowest = calloc(iters, sizeof *slowest);
	if (rank == 0) {
		printf("# collmpi: %d ranks, Open MPI, median of %d after %d warm-ups, a barrier before each, check %s\n",
		       nranks, iters, warmup, check ? "true" : "false");
		printf("# op              size     time(us)  algbw(GB/s)  busbw(GB/s)  check\n");
	}
	char *opsCopy = strdup(ops);
	for (char *op = strtok(opsCopy, ","); op; op = strtok(NULL, ",")) {
		char *sizesCopy = strdup(sizes), *save = NULL;
		for (char *ss = strtok_r(sizesCopy, ",", &save); ss; ss = strtok_r(NULL, ",", &save)) {
			long size = effective_size(op, parse_size(ss));
			void *send = aligned_alloc(64, (size + 63) / 64 * 64), *recv = aligned_alloc(64, (size + 63) / 64 * 64);
			memset(send, 1, size);
			memset(recv, 0, size);
			for (int it = 0; it < warmup + iters; it++) {
				if (check) prepare(op, size, it, send, recv);
				MPI_Barrier(MPI_COMM_WORLD);
				double t0 = MPI_Wtime();
				run_op(op, size, send, recv);
				double el = MPI_Wtime() - t0;
				if (it >= warmup) times[it - warmup] = el;
				if (check && !verify(op, size, it, recv)) {
					fprintf(stderr, "collmpi: rank %d: %s %ld bytes, run %d: wrong result\n", rank, op, size, it);
					MPI_Abort(MPI_COMM_WORLD, 1);
				}
			}
			MPI_Allreduce(times, slowest, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
			qsort(slowest, iters, sizeof *slowest, cmp_double);
			double med = iters % 2 ? slowest[iters / 2] : (slowest[iters / 2 - 1] + slowest[iters / 2]) / 2;
			if (rank == 0) {
				double algbw = size / med / 1e9;
				printf("%-12s %10ld %12.2f %12.3f %12.3f  %s\n", op, size, med * 1e6, algbw, algbw * bus_factor(op),
				       check ? "ok" : "-");
				fflush(stdout);
			}
			free(send);
			free(recv);
		}
		free(sizesCopy);
	}
	free(opsCopy);
	free(times);
	free(slowest);
	MPI_Finalize();
	return 0;
}
