/*
 * echo.c: a plain TCP echo server and client, nothing RDMA in it. Run under
 * LD_PRELOAD=librspreload.so (rdma-core's rsockets) it talks rsockets to the
 * Go side in rsocket mode (rdma.Config.Wire = "rsocket").
 *
 *   echo server IP PORT          echo one connection until EOF, then close
 *   echo client IP PORT BYTES    send BYTES of a counting pattern, check the
 *                                echo, shut down writing, expect EOF
 *   echo sink IP PORT            poll and read until EOF; print the byte count
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *what) { perror(what); return 1; }

int main(int argc, char **argv)
{
	static unsigned char buf[65536], got[65536];
	struct sockaddr_in sa = { .sin_family = AF_INET };
	long long total = 0;
	ssize_t n = -1;
	int fd, c;

	if (argc < 4 || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1)
		return fprintf(stderr, "usage: echo server|client|sink IP PORT [BYTES]\n"), 2;
	sa.sin_port = htons(atoi(argv[3]));
	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		return fail("socket");
	if (!strcmp(argv[1], "server")) {
		if (bind(fd, (struct sockaddr *) &sa, sizeof sa) || listen(fd, 1))
			return fail("bind/listen");
		if ((c = accept(fd, NULL, NULL)) < 0)
			return fail("accept");
		while ((n = recv(c, buf, sizeof buf, 0)) > 0) {
			for (ssize_t off = 0, w; off < n; off += w)
				if ((w = send(c, buf + off, n - off, 0)) <= 0)
					return fail("send");
			total += n;
		}
		if (n < 0)
			return fail("recv");
		printf("echo server: %lld bytes, then EOF\n", total);
		close(c);
	} else if (connect(fd, (struct sockaddr *) &sa, sizeof sa)) {
		return fail("connect");
	} else if (!strcmp(argv[1], "sink")) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		while (poll(&p, 1, -1) >= 0 && (n = recv(fd, buf, sizeof buf, 0)) > 0)
			total += n;
		printf("sink: %lld bytes, then %s\n", total, n ? "an error" : "EOF");
		return n != 0;
	} else {
		long long bytes = argc > 4 ? atoll(argv[4]) : 1 << 20;
		for (long long off = 0; off < bytes; ) {
			size_t k = bytes - off < (long long) sizeof buf ? (size_t) (bytes - off) : sizeof buf, r = 0;
			for (size_t i = 0; i < k; i++)
				buf[i] = (unsigned char) ((off + i) * 7);
			if (send(fd, buf, k, 0) != (ssize_t) k)
				return fail("send");
			while (r < k) {
				if ((n = recv(fd, got + r, k - r, 0)) <= 0)
					return fail("recv echo");
				r += n;
			}
			if (memcmp(buf, got, k))
				return fprintf(stderr, "echo client: data differs near byte %lld\n", off), 1;
			off += k;
		}
		if (shutdown(fd, SHUT_WR))
			return fail("shutdown");
		if ((n = recv(fd, buf, sizeof buf, 0)) != 0)
			return fprintf(stderr, "echo client: want EOF after shutdown, got %zd\n", n), 1;
		printf("echo client: %lld bytes echoed and checked, EOF after shutdown\n", bytes);
	}
	close(fd);
	return 0;
}
