# Megatron-LM's interleaved 1F1B schedule with batched point-to-point communication, as each pipeline
# rank issues it at P=2, V=2, M=4 (group size g=2). At P=2 a rank's previous and next ranks are the
# same rank, so one batch can post a gradient and an activation to it; the peer's batch lists the two
# receives the other way round, and tagless messages pair in order: they swap.
# Derived by reading NVIDIA/Megatron-LM at commit d98e8a64ddf34856e74b24714e3bedb2f5a39553:
# - megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving
#   (training, overlap_p2p_comm=False, overlap_p2p_comm_warmup_flush=False): the recv_forward before
#   the warmup; get_pp_rank_microbatches (warmup = 2 (P-1-r) + (V-1) g forwards, g =
#   microbatch_group_size_per_vp_stage, default P); get_schedule_table (forward k runs chunk and
#   microbatch k of the table, backward k the chunk V-1-chunk(k)); recv_tensor_from_previous_stage
#   (whether, and for which chunk, each iteration receives); the warmup loop's
#   send_forward_recv_forward, and send_forward_backward_recv_forward_backward on its last iteration;
#   the steady 1F1B loop's send_forward_backward_recv_forward_backward; the cooldown's
#   send_backward_recv_backward.
# - megatron/core/pipeline_parallel/p2p_communication.py, P2PCommunicator._communicate with
#   config.batch_p2p_comm: _batched_p2p_ops posts one torch.distributed.batch_isend_irecv per call, its
#   ops in the order send_prev, recv_prev, send_next, recv_next (a GROUP here, members in that order;
#   a call with one op is a group of one: a batch, on the process group's communicator under NCCL).
#   prev and next ranks wrap around the ring.
# - megatron/training/argument_utils.py sets batch_p2p_comm = not overlap_p2p_comm, and
#   megatron/training/arguments.py (validate_args) refuses the interleaved schedule without
#   overlap_p2p_comm unless pipeline-model-parallel size > 2, "to avoid having multiple p2p sends and
#   recvs between same 2 ranks per communication batch".
# Stage s = chunk * P + rank (schedc's `place loop`); a receive is named by the stage that receives and
# the microbatch it is meant for (the next one that chunk consumes). Each line is one iteration.
schedule megatron_interleaved_p2 {
  rank 0:
    0F0 (0SEND_F0)GROUP                                               # warmup k=0
    0F1 (2RECV_F0;0SEND_F1)GROUP                               # warmup k=1
    2F0 (2RECV_F1;2SEND_F0)GROUP                               # warmup k=2
    2F1 (2SEND_F1;2RECV_B0)GROUP                               # warmup k=3
    0F2 2B0 (2SEND_B0;0SEND_F2;2RECV_B1)GROUP                  # 1F1B k=0
    0F3 2B1 (2SEND_B1;2RECV_F2;0SEND_F3;0RECV_B0)GROUP         # 1F1B k=1
    2F2 0B0 (2RECV_F3;2SEND_F2;0RECV_B1)GROUP                  # 1F1B k=2
    2F3 0B1 (2SEND_F3;2RECV_B2)GROUP                           # 1F1B k=3
    2B2 (2SEND_B2;2RECV_B3)GROUP                               # cooldown k=4
    2B3 (2SEND_B3;0RECV_B2)GROUP                               # cooldown k=5
    0B2 (0RECV_B3)GROUP                                               # cooldown k=6
    0B3                                                        # cooldown k=7
  rank 1:
    (1RECV_F0)GROUP                                                   # recv_forward before the warmup
    1F0 (1RECV_F1;1SEND_F0)GROUP                               # warmup k=0
    1F1 (3RECV_F0;1SEND_F1)GROUP                               # warmup k=1
    3F0 3B0 (3SEND_B0;3RECV_F1)GROUP                           # 1F1B k=0
    3F1 3B1 (3SEND_B1;1RECV_F2;1RECV_B0)GROUP                  # 1F1B k=1
    1F2 1B0 (1SEND_B0;1RECV_F3;1SEND_F2;1RECV_B1)GROUP         # 1F1B k=2
    1F3 1B1 (1SEND_B1;3RECV_F2;1SEND_F3)GROUP                  # 1F1B k=3
    3F2 3B2 (3SEND_B2;3RECV_F3)GROUP                           # 1F1B k=4
    3F3 3B3 (3SEND_B3;1RECV_B2)GROUP                           # 1F1B k=5
    1B2 (1SEND_B2;1RECV_B3)GROUP                               # cooldown k=6
    1B3 (1SEND_B3)GROUP                                               # cooldown k=7
}
