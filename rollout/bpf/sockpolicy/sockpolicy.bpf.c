// SPDX-License-Identifier: GPL-2.0
// ccab per-connection congestion-control policy (rollout/sockpolicy/README.md).
//
// A cgroup sock_ops program. When a connection of a process in the attached cgroup is
// established passively (PASSIVE_ESTABLISHED: nginx accepting a client) or starts actively
// (TCP_CONNECT), the peer address is looked up in the current policy, an LPM trie of prefixes
// (IPv4 as IPv4-mapped IPv6, ::ffff:a.b.c.d/96+len, so a dual-stack listener's v4 peers match
// the same entries); on a match the connection's congestion control is set with
// bpf_setsockopt(TCP_CONGESTION) and the policy generation that chose it is recorded under the
// socket's cookie (the cookie inet_diag reports), for the collector.
//
// The policy is swapped whole: policy_outer is an array of one map whose only slot userspace
// replaces with a freshly filled trie (one map update, atomic for every later lookup). An
// empty trie (or an empty slot) is "no policy": connections keep the host's default.
// Connections that exist when the policy changes keep their algorithm.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define SOL_TCP 6
#define TCP_CONGESTION 13
#define CC_NAME_MAX 16 /* TCP_CA_NAME_MAX */
#define AF_INET 2
#define AF_INET6 10
#define POLICY_MAX_PREFIXES 1048576
#define CONN_MAX_ENTRIES 262144

struct policy_key {
	__u32 prefixlen; /* bits of addr that count, 0..128 */
	__u8 addr[16];   /* IPv6, or IPv4-mapped IPv6 */
};

struct policy_value {
	__u64 generation;      /* the assignment generation that published this policy */
	char cc[CC_NAME_MAX];  /* NUL-padded congestion-control name */
};

struct conn_value {
	__u64 generation; /* policy generation that matched the connection */
	__s32 result;     /* bpf_setsockopt's return: 0 = the algorithm was set, else -errno */
	__u32 op;         /* BPF_SOCK_OPS_* callback that applied it */
};

enum policy_stat {
	STAT_SEEN = 0,      /* connections looked up */
	STAT_NO_POLICY,     /* no policy map in the slot */
	STAT_MATCHED,       /* peer in a policy prefix */
	STAT_SET_OK,        /* bpf_setsockopt succeeded */
	STAT_SET_FAILED,    /* bpf_setsockopt failed (result recorded per connection) */
	STAT_RECORD_FAILED, /* the conn map update failed */
	STAT_MAX,
};

struct policy_trie {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, POLICY_MAX_PREFIXES);
	/* sizes, not __type: clang 14 writes types reached only through the outer map's
	 * __array as forward declarations, which loaders cannot size */
	__uint(key_size, sizeof(struct policy_key));
	__uint(value_size, sizeof(struct policy_value));
} policy_inner SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct policy_trie);
} policy_outer SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CONN_MAX_ENTRIES);
	__type(key, __u64); /* socket cookie */
	__type(value, struct conn_value);
} conn_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		*v += 1;
}

SEC("sockops")
int ccab_sockpolicy(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op;
	if (op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_TCP_CONNECT_CB)
		return 1;

	struct policy_key key = {.prefixlen = 128};
	__u32 family = skops->family;
	if (family == AF_INET) {
		__u32 ip4 = skops->remote_ip4; /* network byte order */
		key.addr[10] = 0xff;
		key.addr[11] = 0xff;
		__builtin_memcpy(&key.addr[12], &ip4, 4);
	} else if (family == AF_INET6) {
		__u32 w0 = skops->remote_ip6[0], w1 = skops->remote_ip6[1];
		__u32 w2 = skops->remote_ip6[2], w3 = skops->remote_ip6[3];
		__builtin_memcpy(&key.addr[0], &w0, 4);
		__builtin_memcpy(&key.addr[4], &w1, 4);
		__builtin_memcpy(&key.addr[8], &w2, 4);
		__builtin_memcpy(&key.addr[12], &w3, 4);
	} else {
		return 1;
	}
	count(STAT_SEEN);

	__u32 slot = 0;
	void *trie = bpf_map_lookup_elem(&policy_outer, &slot);
	if (!trie) {
		count(STAT_NO_POLICY);
		return 1;
	}
	struct policy_value *pv = bpf_map_lookup_elem(trie, &key);
	if (!pv)
		return 1;
	count(STAT_MATCHED);

	char cc[CC_NAME_MAX];
	__builtin_memcpy(cc, pv->cc, CC_NAME_MAX);
	cc[CC_NAME_MAX - 1] = 0;
	struct conn_value cv = {.generation = pv->generation, .op = op};
	cv.result = bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cc, CC_NAME_MAX);
	count(cv.result == 0 ? STAT_SET_OK : STAT_SET_FAILED);

	__u64 cookie = bpf_get_socket_cookie(skops);
	if (bpf_map_update_elem(&conn_policy, &cookie, &cv, BPF_ANY))
		count(STAT_RECORD_FAILED);
	return 1;
}

char _license[] SEC("license") = "GPL";
