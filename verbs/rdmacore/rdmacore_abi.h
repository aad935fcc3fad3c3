/*
 * rdmacore_abi.h: the parts of libibverbs' and librdmacm's binary interface
 * that package rdmacore uses, declared here so that the package builds
 * without rdma-core's headers and loads the libraries at run time
 * (dlopen of libibverbs.so.1 and librdmacm.so.1).
 *
 * These are the stable ABI of the sonames the package opens, written from
 * rdma-core's headers: each function is looked up at its symbol version
 * (IBVERBS_1.1 or 1.0, RDMACM_1.0 or 1.2; ibv_reg_dmabuf_mr, optional, at
 * IBVERBS_1.12), whose structs rdma-core does not
 * change; it extends them through new *_ex structs and functions instead
 * (ibv_port_attr grew at its end, and the exported ibv_query_port still
 * fills only the part up to flags). Exact layouts matter in two ways:
 *   - ibv_post_send, ibv_post_recv, ibv_poll_cq and ibv_req_notify_cq are
 *     inline in rdma-core's verbs.h: they call through the ops table of the
 *     QP's or CQ's ibv_context, so ibv_qp.context, ibv_cq.context and the
 *     offsets of those four function pointers in ibv_context must be exact;
 *     so must ibv_send_wr, ibv_recv_wr, ibv_sge and ibv_wc, which the
 *     device's provider library reads and writes (ibv_wc as an array).
 *   - rdma_get_local_addr and rdma_get_peer_addr are inline in rdma_cma.h
 *     (addresses inside rdma_cm_id), and the package reads rdma_cm_id.verbs
 *     and .qp, rdma_cm_event and rdma_conn_param directly.
 * Structs the libraries fill in (ibv_device_attr, ibv_qp_attr, ...) are
 * declared whole, so that the caller's buffer is as large as theirs.
 *
 * Fields keep rdma-core's names; runs of entries the package never uses
 * (most of the ops table, the middle of ibv_device_attr) are reserved arrays of the same size.
 * layout_test.go compiles this header beside rdma-core's own, where those
 * are installed, and compares every size, offset and constant.
 */
#ifndef RDMACORE_ABI_H
#define RDMACORE_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/socket.h>

/* --- libibverbs: constants --- */

enum {
	IBV_TRANSPORT_IWARP = 1,   /* enum ibv_transport_type */
	IBV_QPT_RC = 2,            /* enum ibv_qp_type */
	IBV_QPS_INIT = 1,          /* enum ibv_qp_state */
	IBV_EVENT_CQ_ERR = 0,      /* enum ibv_event_type */
	IBV_MW_TYPE_2 = 2,         /* enum ibv_mw_type */
};

/* enum ibv_qp_attr_mask */
enum {
	IBV_QP_STATE = 1 << 0,
	IBV_QP_ACCESS_FLAGS = 1 << 3,
	IBV_QP_PKEY_INDEX = 1 << 4,
	IBV_QP_PORT = 1 << 5,
	IBV_QP_AV = 1 << 7,
	IBV_QP_PATH_MTU = 1 << 8,
	IBV_QP_TIMEOUT = 1 << 9,
	IBV_QP_RETRY_CNT = 1 << 10,
	IBV_QP_RNR_RETRY = 1 << 11,
	IBV_QP_RQ_PSN = 1 << 12,
	IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
	IBV_QP_MIN_RNR_TIMER = 1 << 15,
	IBV_QP_SQ_PSN = 1 << 16,
	IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
	IBV_QP_CAP = 1 << 19,
	IBV_QP_DEST_QPN = 1 << 20,
};

/* --- libibverbs: objects --- */

struct ibv_context;
struct ibv_srq;
struct ibv_mw;

union ibv_gid {
	uint8_t raw[16];
	struct {
		uint64_t subnet_prefix; /* big-endian */
		uint64_t interface_id;  /* big-endian */
	} global;
};

struct ibv_device {
	void *_ops[2];          /* two reserved function pointers */
	int node_type;          /* enum ibv_node_type */
	int transport_type;     /* enum ibv_transport_type */
	char name[64];
	char dev_name[64];
	char dev_path[256];
	char ibdev_path[256];
};

struct ibv_wc;
struct ibv_cq;
struct ibv_qp;
struct ibv_send_wr;
struct ibv_recv_wr;
struct ibv_mw;
struct ibv_pd;

/* The ops table embedded in every ibv_context: 32 function pointers, of
 * which the inline data-path verbs use four. The others are libibverbs'
 * compatibility entries and are never called through here. */
struct ibv_context_ops {
	void *_reserved0[7];
	struct ibv_mw *(*alloc_mw)(struct ibv_pd *pd, int type); /* enum ibv_mw_type */
	void *_reserved8;        /* bind_mw: type 1 windows only */
	int (*dealloc_mw)(struct ibv_mw *mw);
	void *_reserved10;
	int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
	int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
	void *_reserved13[12];
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
	int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
	void *_reserved27[5];
};

struct ibv_context {
	struct ibv_device *device;
	struct ibv_context_ops ops;
	int cmd_fd;
	int async_fd;
	int num_comp_vectors;
	pthread_mutex_t mutex;
	void *abi_compat;
};

struct ibv_device_attr {
	char fw_ver[64];
	uint64_t node_guid;      /* big-endian */
	uint64_t sys_image_guid; /* big-endian */
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	int max_qp;
	int max_qp_wr;
	unsigned int device_cap_flags;
	int max_sge;
	int max_sge_rd;
	int max_cq;
	int max_cqe;
	int max_mr;
	int max_pd;
	int max_qp_rd_atom;
	int max_ee_rd_atom;
	int max_res_rd_atom;
	int max_qp_init_rd_atom;
	int _reserved[4];        /* max_ee_init_rd_atom .. max_rdd */
	int max_mw;
	int _reserved2[11];      /* max_raw_ipv6_qp .. max_srq_sge */
	uint16_t max_pkeys;
	uint8_t local_ca_ack_delay;
	uint8_t phys_port_cnt;
};

struct ibv_port_attr {
	int state;               /* enum ibv_port_state */
	int max_mtu;             /* enum ibv_mtu */
	int active_mtu;          /* enum ibv_mtu */
	int gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint32_t bad_pkey_cntr;
	uint32_t qkey_viol_cntr;
	uint16_t pkey_tbl_len;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t lmc;
	uint8_t max_vl_num;
	uint8_t sm_sl;
	uint8_t subnet_timeout;
	uint8_t init_type_reply;
	uint8_t active_width;
	uint8_t active_speed;
	uint8_t phys_state;
	uint8_t link_layer;
	uint8_t flags;
	uint16_t port_cap_flags2;
};

struct ibv_async_event {
	union {
		struct ibv_cq *cq;
		struct ibv_qp *qp;
		struct ibv_srq *srq;
		void *wq;
		int port_num;
	} element;
	int event_type;          /* enum ibv_event_type */
};

struct ibv_pd {
	struct ibv_context *context;
	uint32_t handle;
};

struct ibv_mr {
	struct ibv_context *context;
	struct ibv_pd *pd;
	void *addr;
	size_t length;
	uint32_t handle;
	uint32_t lkey;
	uint32_t rkey;
};

struct ibv_comp_channel {
	struct ibv_context *context;
	int fd;
	int refcnt;
};

struct ibv_cq {
	struct ibv_context *context;
	struct ibv_comp_channel *channel;
	void *cq_context;
	uint32_t handle;
	int cqe;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t comp_events_completed;
	uint32_t async_events_completed;
};

struct ibv_qp {
	struct ibv_context *context;
	void *qp_context;
	struct ibv_pd *pd;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	uint32_t handle;
	uint32_t qp_num;
	int state;               /* enum ibv_qp_state */
	int qp_type;             /* enum ibv_qp_type */
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
};

struct ibv_qp_cap {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
};

struct ibv_qp_init_attr {
	void *qp_context;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	struct ibv_qp_cap cap;
	int qp_type;             /* enum ibv_qp_type */
	int sq_sig_all;
};

struct ibv_global_route {
	union ibv_gid dgid;
	uint32_t flow_label;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
};

struct ibv_ah_attr {
	struct ibv_global_route grh;
	uint16_t dlid;
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t static_rate;
	uint8_t is_global;
	uint8_t port_num;
};

struct ibv_qp_attr {
	int qp_state;            /* enum ibv_qp_state */
	int cur_qp_state;
	int path_mtu;            /* enum ibv_mtu */
	int path_mig_state;      /* enum ibv_mig_state */
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	unsigned int qp_access_flags;
	struct ibv_qp_cap cap;
	struct ibv_ah_attr ah_attr;
	struct ibv_ah_attr alt_ah_attr;
	uint16_t pkey_index;
	uint16_t alt_pkey_index;
	uint8_t en_sqd_async_notify;
	uint8_t sq_draining;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer;
	uint8_t port_num;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
	uint8_t alt_port_num;
	uint8_t alt_timeout;
	uint32_t rate_limit;
};

struct ibv_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct ibv_mw_bind_info {
	struct ibv_mr *mr;
	uint64_t addr;
	uint64_t length;
	unsigned int mw_access_flags;
};

struct ibv_mw {
	struct ibv_context *context;
	struct ibv_pd *pd;
	uint32_t rkey;
	uint32_t handle;
	int type;                /* enum ibv_mw_type */
};

struct ibv_send_wr {
	uint64_t wr_id;
	struct ibv_send_wr *next;
	struct ibv_sge *sg_list;
	int num_sge;
	int opcode;              /* enum ibv_wr_opcode */
	unsigned int send_flags;
	uint32_t imm_data;       /* big-endian; also invalidate_rkey */
	union {
		struct {
			uint64_t remote_addr;
			uint32_t rkey;
		} rdma;
		struct {
			uint64_t remote_addr;
			uint64_t compare_add;
			uint64_t swap;
			uint32_t rkey;
		} atomic;
		struct {
			void *ah;
			uint32_t remote_qpn;
			uint32_t remote_qkey;
		} ud;
	} wr;
	union {
		struct {
			uint32_t remote_srqn;
		} xrc;
	} qp_type;
	union {
		struct {
			struct ibv_mw *mw;
			uint32_t rkey;
			struct ibv_mw_bind_info bind_info;
		} bind_mw;
		struct {
			void *hdr;
			uint16_t hdr_sz;
			uint16_t mss;
		} tso;
	};
};

struct ibv_recv_wr {
	uint64_t wr_id;
	struct ibv_recv_wr *next;
	struct ibv_sge *sg_list;
	int num_sge;
};

struct ibv_wc {
	uint64_t wr_id;
	int status;              /* enum ibv_wc_status */
	int opcode;              /* enum ibv_wc_opcode */
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_data;       /* big-endian; also invalidated_rkey */
	uint32_t qp_num;
	uint32_t src_qp;
	unsigned int wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
};

/* --- librdmacm --- */

enum {
	RDMA_PS_TCP = 0x0106,    /* enum rdma_port_space */
};

enum {
	RDMA_OPTION_ID = 0,             /* rdma_set_option's level */
	RDMA_OPTION_ID_TOS = 0,         /* uint8_t: the IP type of service */
	RDMA_OPTION_ID_ACK_TIMEOUT = 3, /* uint8_t: the QP's local ACK timeout exponent */
};

struct rdma_event_channel {
	int fd;
};

struct rdma_ib_addr {
	union ibv_gid sgid;
	union ibv_gid dgid;
	uint16_t pkey;           /* big-endian */
};

struct rdma_addr {
	struct sockaddr_storage src_storage; /* a sockaddr_in or sockaddr_in6 */
	struct sockaddr_storage dst_storage;
	union {
		struct rdma_ib_addr ibaddr;
	} addr;
};

struct rdma_route {
	struct rdma_addr addr;
	void *path_rec;          /* struct ibv_sa_path_rec * */
	int num_paths;
};

struct rdma_cm_event;

struct rdma_cm_id {
	struct ibv_context *verbs;
	struct rdma_event_channel *channel;
	void *context;
	struct ibv_qp *qp;
	struct rdma_route route;
	int ps;                  /* enum rdma_port_space */
	uint8_t port_num;
	struct rdma_cm_event *event;
	struct ibv_comp_channel *send_cq_channel;
	struct ibv_cq *send_cq;
	struct ibv_comp_channel *recv_cq_channel;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	struct ibv_pd *pd;
	int qp_type;             /* enum ibv_qp_type */
};

struct rdma_conn_param {
	const void *private_data;
	uint8_t private_data_len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint32_t qp_num;
};

struct rdma_ud_param {
	const void *private_data;
	uint8_t private_data_len;
	struct ibv_ah_attr ah_attr;
	uint32_t qp_num;
	uint32_t qkey;
};

struct rdma_cm_event {
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	int event;               /* enum rdma_cm_event_type */
	int status;
	union {
		struct rdma_conn_param conn;
		struct rdma_ud_param ud;
	} param;
};

#endif /* RDMACORE_ABI_H */
