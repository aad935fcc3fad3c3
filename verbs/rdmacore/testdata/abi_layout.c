/* Prints the size of every struct in rdmacore_abi.h and the offset of every
 * field the package or the libraries rely on, the value of every constant it
 * declares, compiled either against that header or, with -DRDMA_CORE_HEADERS,
 * against rdma-core's own headers: layout_test.go compares the two outputs. */
#ifdef RDMA_CORE_HEADERS
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#else
#include "rdmacore_abi.h"
#endif
#include <stdio.h>

#define SIZE(T) printf("sizeof(%s) = %zu, align %zu\n", #T, sizeof(T), _Alignof(T))
#define OFF(T, f) printf("offsetof(%s, %s) = %zu\n", #T, #f, offsetof(T, f))
#define VALUE(c) printf("%s = %ld\n", #c, (long)(c))

int main(void)
{
	SIZE(union ibv_gid);

	SIZE(struct ibv_device);
	OFF(struct ibv_device, node_type);
	OFF(struct ibv_device, transport_type);
	OFF(struct ibv_device, name);
	OFF(struct ibv_device, ibdev_path);

	SIZE(struct ibv_context_ops);
	OFF(struct ibv_context_ops, alloc_mw);
	OFF(struct ibv_context_ops, dealloc_mw);
	OFF(struct ibv_context_ops, poll_cq);
	OFF(struct ibv_context_ops, req_notify_cq);
	OFF(struct ibv_context_ops, post_send);
	OFF(struct ibv_context_ops, post_recv);

	SIZE(struct ibv_context);
	OFF(struct ibv_context, device);
	OFF(struct ibv_context, ops);
	OFF(struct ibv_context, cmd_fd);
	OFF(struct ibv_context, async_fd);
	OFF(struct ibv_context, num_comp_vectors);
	OFF(struct ibv_context, abi_compat);

	SIZE(struct ibv_device_attr);
	OFF(struct ibv_device_attr, node_guid);
	OFF(struct ibv_device_attr, max_mr_size);
	OFF(struct ibv_device_attr, vendor_id);
	OFF(struct ibv_device_attr, max_qp);
	OFF(struct ibv_device_attr, max_qp_wr);
	OFF(struct ibv_device_attr, max_sge);
	OFF(struct ibv_device_attr, max_cq);
	OFF(struct ibv_device_attr, max_cqe);
	OFF(struct ibv_device_attr, max_mr);
	OFF(struct ibv_device_attr, max_pd);
	OFF(struct ibv_device_attr, max_qp_rd_atom);
	OFF(struct ibv_device_attr, max_qp_init_rd_atom);
	OFF(struct ibv_device_attr, max_mw);
	OFF(struct ibv_device_attr, max_pkeys);
	OFF(struct ibv_device_attr, phys_port_cnt);

	/* ibv_query_port fills the layout of libibverbs 1.1, up to flags. */
	OFF(struct ibv_port_attr, state);
	OFF(struct ibv_port_attr, max_mtu);
	OFF(struct ibv_port_attr, active_mtu);
	OFF(struct ibv_port_attr, gid_tbl_len);
	OFF(struct ibv_port_attr, max_msg_sz);
	OFF(struct ibv_port_attr, lid);
	OFF(struct ibv_port_attr, link_layer);
	OFF(struct ibv_port_attr, flags);

	SIZE(struct ibv_async_event);
	OFF(struct ibv_async_event, element.cq);
	OFF(struct ibv_async_event, event_type);

	SIZE(struct ibv_pd);
	SIZE(struct ibv_mr);
	OFF(struct ibv_mr, lkey);
	OFF(struct ibv_mr, rkey);

	SIZE(struct ibv_comp_channel);
	OFF(struct ibv_comp_channel, fd);

	SIZE(struct ibv_cq);
	OFF(struct ibv_cq, context);
	OFF(struct ibv_cq, cqe);

	SIZE(struct ibv_qp);
	OFF(struct ibv_qp, context);
	OFF(struct ibv_qp, qp_num);
	OFF(struct ibv_qp, events_completed);

	SIZE(struct ibv_qp_cap);
	SIZE(struct ibv_qp_init_attr);
	OFF(struct ibv_qp_init_attr, send_cq);
	OFF(struct ibv_qp_init_attr, recv_cq);
	OFF(struct ibv_qp_init_attr, cap);
	OFF(struct ibv_qp_init_attr, cap.max_inline_data);
	OFF(struct ibv_qp_init_attr, qp_type);
	OFF(struct ibv_qp_init_attr, sq_sig_all);

	SIZE(struct ibv_global_route);
	SIZE(struct ibv_ah_attr);
	SIZE(struct ibv_qp_attr);
	OFF(struct ibv_qp_attr, qp_state);
	OFF(struct ibv_qp_attr, path_mtu);
	OFF(struct ibv_qp_attr, rq_psn);
	OFF(struct ibv_qp_attr, sq_psn);
	OFF(struct ibv_qp_attr, dest_qp_num);
	OFF(struct ibv_qp_attr, qp_access_flags);
	OFF(struct ibv_qp_attr, pkey_index);
	OFF(struct ibv_qp_attr, port_num);
	OFF(struct ibv_qp_attr, ah_attr.grh.dgid);
	OFF(struct ibv_qp_attr, ah_attr.grh.flow_label);
	OFF(struct ibv_qp_attr, ah_attr.grh.sgid_index);
	OFF(struct ibv_qp_attr, ah_attr.grh.hop_limit);
	OFF(struct ibv_qp_attr, ah_attr.grh.traffic_class);
	OFF(struct ibv_qp_attr, ah_attr.dlid);
	OFF(struct ibv_qp_attr, ah_attr.sl);
	OFF(struct ibv_qp_attr, ah_attr.src_path_bits);
	OFF(struct ibv_qp_attr, ah_attr.static_rate);
	OFF(struct ibv_qp_attr, ah_attr.is_global);
	OFF(struct ibv_qp_attr, ah_attr.port_num);
	OFF(struct ibv_qp_attr, cap);
	OFF(struct ibv_qp_attr, ah_attr);
	OFF(struct ibv_qp_attr, alt_ah_attr);
	OFF(struct ibv_qp_attr, max_rd_atomic);
	OFF(struct ibv_qp_attr, max_dest_rd_atomic);
	OFF(struct ibv_qp_attr, min_rnr_timer);
	OFF(struct ibv_qp_attr, timeout);
	OFF(struct ibv_qp_attr, retry_cnt);
	OFF(struct ibv_qp_attr, rnr_retry);
	OFF(struct ibv_qp_attr, rate_limit);

	SIZE(struct ibv_sge);
	OFF(struct ibv_sge, length);
	OFF(struct ibv_sge, lkey);

	SIZE(struct ibv_send_wr);
	OFF(struct ibv_send_wr, next);
	OFF(struct ibv_send_wr, sg_list);
	OFF(struct ibv_send_wr, num_sge);
	OFF(struct ibv_send_wr, opcode);
	OFF(struct ibv_send_wr, send_flags);
	OFF(struct ibv_send_wr, imm_data);
	OFF(struct ibv_send_wr, wr.rdma.remote_addr);
	OFF(struct ibv_send_wr, wr.rdma.rkey);
	OFF(struct ibv_send_wr, wr.atomic.rkey);
	OFF(struct ibv_send_wr, qp_type.xrc.remote_srqn);
	OFF(struct ibv_send_wr, bind_mw.mw);
	OFF(struct ibv_send_wr, bind_mw.rkey);
	OFF(struct ibv_send_wr, bind_mw.bind_info.mr);
	OFF(struct ibv_send_wr, bind_mw.bind_info.addr);
	OFF(struct ibv_send_wr, bind_mw.bind_info.length);
	OFF(struct ibv_send_wr, bind_mw.bind_info.mw_access_flags);
	OFF(struct ibv_send_wr, tso.mss);
	SIZE(struct ibv_mw_bind_info);
	SIZE(struct ibv_mw);
	OFF(struct ibv_mw, pd);
	OFF(struct ibv_mw, rkey);
	OFF(struct ibv_mw, handle);
	OFF(struct ibv_mw, type);

	SIZE(struct ibv_recv_wr);
	OFF(struct ibv_recv_wr, next);
	OFF(struct ibv_recv_wr, sg_list);
	OFF(struct ibv_recv_wr, num_sge);

	SIZE(struct ibv_wc);
	OFF(struct ibv_wc, status);
	OFF(struct ibv_wc, opcode);
	OFF(struct ibv_wc, vendor_err);
	OFF(struct ibv_wc, byte_len);
	OFF(struct ibv_wc, imm_data);
	OFF(struct ibv_wc, qp_num);
	OFF(struct ibv_wc, wc_flags);
	OFF(struct ibv_wc, dlid_path_bits);

	SIZE(struct rdma_event_channel);
	SIZE(struct rdma_ib_addr);
	SIZE(struct rdma_addr);
	OFF(struct rdma_addr, src_storage);
	OFF(struct rdma_addr, dst_storage);
	OFF(struct rdma_addr, addr.ibaddr);
	SIZE(struct rdma_route);
	OFF(struct rdma_route, num_paths);
	SIZE(struct rdma_cm_id);
	OFF(struct rdma_cm_id, verbs);
	OFF(struct rdma_cm_id, qp);
	OFF(struct rdma_cm_id, route);
	OFF(struct rdma_cm_id, route.addr.src_storage);
	OFF(struct rdma_cm_id, route.addr.dst_storage);
	OFF(struct rdma_cm_id, ps);
	OFF(struct rdma_cm_id, event);
	OFF(struct rdma_cm_id, qp_type);
	SIZE(struct rdma_conn_param);
	OFF(struct rdma_conn_param, private_data_len);
	OFF(struct rdma_conn_param, responder_resources);
	OFF(struct rdma_conn_param, initiator_depth);
	OFF(struct rdma_conn_param, flow_control);
	OFF(struct rdma_conn_param, retry_count);
	OFF(struct rdma_conn_param, rnr_retry_count);
	OFF(struct rdma_conn_param, qp_num);
	SIZE(struct rdma_ud_param);
	SIZE(struct rdma_cm_event);
	OFF(struct rdma_cm_event, id);
	OFF(struct rdma_cm_event, listen_id);
	OFF(struct rdma_cm_event, event);
	OFF(struct rdma_cm_event, status);
	OFF(struct rdma_cm_event, param);

	VALUE(IBV_TRANSPORT_IWARP);
	VALUE(IBV_QPT_RC);
	VALUE(IBV_QPS_INIT);
	VALUE(IBV_EVENT_CQ_ERR);
	VALUE(IBV_MW_TYPE_2);
	VALUE(IBV_QP_STATE);
	VALUE(IBV_QP_ACCESS_FLAGS);
	VALUE(IBV_QP_PKEY_INDEX);
	VALUE(IBV_QP_PORT);
	VALUE(IBV_QP_AV);
	VALUE(IBV_QP_RQ_PSN);
	VALUE(IBV_QP_SQ_PSN);
	VALUE(IBV_QP_PATH_MTU);
	VALUE(IBV_QP_TIMEOUT);
	VALUE(IBV_QP_RETRY_CNT);
	VALUE(IBV_QP_RNR_RETRY);
	VALUE(IBV_QP_MAX_QP_RD_ATOMIC);
	VALUE(IBV_QP_MIN_RNR_TIMER);
	VALUE(IBV_QP_MAX_DEST_RD_ATOMIC);
	VALUE(IBV_QP_CAP);
	VALUE(IBV_QP_DEST_QPN);
	VALUE(RDMA_PS_TCP);
	return 0;
}
