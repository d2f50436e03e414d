/*
 * dhcp6floor.c - the kernel's floor under bench/dhcp6-rate.sh: the same
 * stateless answers as testenv/cmd/dhcp6floor (Solicit -> Advertise,
 * Request -> Reply, the client id echoed, the address the DUID hashes to),
 * from one thread blocked in recvfrom, with no runtime between it and the
 * socket. What a server spends above this is its own; what the Go floor
 * spends above this is the Go runtime's (netpoller, scheduler).
 *
 *   cc -O2 -o dhcp6floor-c bench/floor/dhcp6floor.c
 *   dhcp6floor-c veth-srv fd99:0:0:1::
 */
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const uint8_t server_duid[] = {0, 3, 0, 1, 0x02, 0x99, 0, 0, 0, 1};

static size_t put_opt(uint8_t *o, uint16_t code, const uint8_t *v, uint16_t len) {
	o[0] = code >> 8, o[1] = code, o[2] = len >> 8, o[3] = len;
	memcpy(o + 4, v, len);
	return 4 + (size_t)len;
}

static void put32(uint8_t *o, uint32_t v) { o[0] = v >> 24, o[1] = v >> 16, o[2] = v >> 8, o[3] = v; }

/* answer returns the length of the reply written to out, or 0 for none. */
static size_t answer(uint8_t *out, const uint8_t *pkt, size_t n, const uint8_t prefix[16]) {
	const uint8_t *cid = NULL, *iaid = (const uint8_t *)"\0\0\0\1";
	uint16_t cidlen = 0;
	uint8_t typ;
	if (n < 4) return 0;
	if (pkt[0] == 1) typ = 2;
	else if (pkt[0] == 3) typ = 7;
	else return 0;
	for (size_t i = 4; i + 4 <= n;) {
		uint16_t code = pkt[i] << 8 | pkt[i + 1], len = pkt[i + 2] << 8 | pkt[i + 3];
		if (i + 4 + len > n) return 0;
		if (code == 1) cid = pkt + i + 4, cidlen = len;
		if (code == 3 && len >= 4) iaid = pkt + i + 4;
		i += 4 + len;
	}
	if (!cid || cidlen < 2 || cidlen > 130) return 0; /* RFC 8415 11.1 */
	uint64_t h = 14695981039346656037ULL; /* FNV-1a, as the Go floor */
	for (uint16_t i = 0; i < cidlen; i++) h = (h ^ cid[i]) * 1099511628211ULL;
	h |= 1ULL << 16;
	uint8_t addr[16];
	memcpy(addr, prefix, 8);
	for (int i = 0; i < 8; i++) addr[8 + i] = h >> (56 - 8 * i);
	size_t o = 0;
	out[o++] = typ, out[o++] = pkt[1], out[o++] = pkt[2], out[o++] = pkt[3];
	o += put_opt(out + o, 1, cid, cidlen);
	o += put_opt(out + o, 2, server_duid, sizeof server_duid);
	uint8_t ia[12 + 28];
	memcpy(ia, iaid, 4), put32(ia + 4, 1800), put32(ia + 8, 2880);
	ia[12] = 0, ia[13] = 5, ia[14] = 0, ia[15] = 24;
	memcpy(ia + 16, addr, 16), put32(ia + 32, 3600), put32(ia + 36, 3600);
	o += put_opt(out + o, 3, ia, sizeof ia);
	return o;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: dhcp6floor-c INTERFACE PREFIX\n");
		return 2;
	}
	uint8_t prefix[16];
	if (inet_pton(AF_INET6, argv[2], prefix) != 1) {
		fprintf(stderr, "dhcp6floor-c: bad prefix %s\n", argv[2]);
		return 2;
	}
	unsigned ifindex = if_nametoindex(argv[1]);
	if (!ifindex) {
		perror("dhcp6floor-c: interface");
		return 1;
	}
	int fd = socket(AF_INET6, SOCK_DGRAM, 0), one = 1, buf = 4 << 20;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf);
	if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, argv[1], strlen(argv[1])) < 0) {
		perror("dhcp6floor-c: SO_BINDTODEVICE");
		return 1;
	}
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons(547), .sin6_addr = in6addr_any};
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		perror("dhcp6floor-c: bind [::]:547");
		return 1;
	}
	struct ipv6_mreq mreq = {.ipv6mr_interface = ifindex};
	inet_pton(AF_INET6, "ff02::1:2", &mreq.ipv6mr_multiaddr);
	if (setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &mreq, sizeof mreq) < 0) {
		perror("dhcp6floor-c: join ff02::1:2");
		return 1;
	}
	signal(SIGTERM, SIG_DFL);
	uint8_t in[1500], out[512];
	for (;;) {
		struct sockaddr_in6 from;
		socklen_t fl = sizeof from;
		ssize_t n = recvfrom(fd, in, sizeof in, 0, (struct sockaddr *)&from, &fl);
		if (n < 0) continue;
		size_t m = answer(out, in, (size_t)n, prefix);
		if (m) sendto(fd, out, m, 0, (struct sockaddr *)&from, fl);
	}
}
