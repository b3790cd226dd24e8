# Megatron-LM's interleaved 1F1B schedule with batched point-to-point communication, as each pipeline
# rank issues it at P=3, V=2, M=6 (group size g=3): the smallest P that Megatron allows without
# overlap_p2p_comm. No batch sends twice to one peer or receives twice from one, and every pair matches.
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
schedule megatron_interleaved_p3 {
  rank 0:
    0F0 (0SEND_F0)GROUP                                               # warmup k=0
    0F1 (0SEND_F1)GROUP                                               # warmup k=1
    0F2 (3RECV_F0;0SEND_F2)GROUP                               # warmup k=2
    3F0 (3RECV_F1;3SEND_F0)GROUP                               # warmup k=3
    3F1 (3RECV_F2;3SEND_F1)GROUP                               # warmup k=4
    3F2 (3SEND_F2)GROUP                                               # warmup k=5
    0F3 (0SEND_F3;3RECV_B0)GROUP                               # warmup k=6
    0F4 3B0 (3SEND_B0;0SEND_F4;3RECV_B1)GROUP                  # 1F1B k=0
    0F5 3B1 (3SEND_B1;3RECV_F3;0SEND_F5;3RECV_B2)GROUP         # 1F1B k=1
    3F3 3B2 (3SEND_B2;3RECV_F4;3SEND_F3;0RECV_B0)GROUP         # 1F1B k=2
    3F4 0B0 (3RECV_F5;3SEND_F4;0RECV_B1)GROUP                  # 1F1B k=3
    3F5 0B1 (3SEND_F5;0RECV_B2)GROUP                           # 1F1B k=4
    0B2 (3RECV_B3)GROUP                                               # cooldown k=5
    3B3 (3SEND_B3;3RECV_B4)GROUP                               # cooldown k=6
    3B4 (3SEND_B4;3RECV_B5)GROUP                               # cooldown k=7
    3B5 (3SEND_B5;0RECV_B3)GROUP                               # cooldown k=8
    0B3 (0RECV_B4)GROUP                                               # cooldown k=9
    0B4 (0RECV_B5)GROUP                                               # cooldown k=10
    0B5                                                        # cooldown k=11
  rank 1:
    (1RECV_F0)GROUP                                                   # recv_forward before the warmup
    1F0 (1RECV_F1;1SEND_F0)GROUP                               # warmup k=0
    1F1 (1RECV_F2;1SEND_F1)GROUP                               # warmup k=1
    1F2 (4RECV_F0;1SEND_F2)GROUP                               # warmup k=2
    4F0 (4RECV_F1;4SEND_F0)GROUP                               # warmup k=3
    4F1 (4RECV_F2;4SEND_F1;4RECV_B0)GROUP                      # warmup k=4
    4F2 4B0 (4SEND_B0;1RECV_F3;4SEND_F2;4RECV_B1)GROUP         # 1F1B k=0
    1F3 4B1 (4SEND_B1;1RECV_F4;1SEND_F3;4RECV_B2)GROUP         # 1F1B k=1
    1F4 4B2 (4SEND_B2;1RECV_F5;1SEND_F4;1RECV_B0)GROUP         # 1F1B k=2
    1F5 1B0 (1SEND_B0;4RECV_F3;1SEND_F5;1RECV_B1)GROUP         # 1F1B k=3
    4F3 1B1 (1SEND_B1;4RECV_F4;4SEND_F3;1RECV_B2)GROUP         # 1F1B k=4
    4F4 1B2 (1SEND_B2;4RECV_F5;4SEND_F4;4RECV_B3)GROUP         # 1F1B k=5
    4F5 4B3 (4SEND_B3;4SEND_F5;4RECV_B4)GROUP                  # 1F1B k=6
    4B4 (4SEND_B4;4RECV_B5)GROUP                               # cooldown k=7
    4B5 (4SEND_B5;1RECV_B3)GROUP                               # cooldown k=8
    1B3 (1SEND_B3;1RECV_B4)GROUP                               # cooldown k=9
    1B4 (1SEND_B4;1RECV_B5)GROUP                               # cooldown k=10
    1B5 (1SEND_B5)GROUP                                               # cooldown k=11
  rank 2:
    (2RECV_F0)GROUP                                                   # recv_forward before the warmup
    2F0 (2RECV_F1;2SEND_F0)GROUP                               # warmup k=0
    2F1 (2RECV_F2;2SEND_F1)GROUP                               # warmup k=1
    2F2 (5RECV_F0;2SEND_F2)GROUP                               # warmup k=2
    5F0 5B0 (5SEND_B0;5RECV_F1)GROUP                           # 1F1B k=0
    5F1 5B1 (5SEND_B1;5RECV_F2)GROUP                           # 1F1B k=1
    5F2 5B2 (5SEND_B2;2RECV_F3;2RECV_B0)GROUP                  # 1F1B k=2
    2F3 2B0 (2SEND_B0;2RECV_F4;2SEND_F3;2RECV_B1)GROUP         # 1F1B k=3
    2F4 2B1 (2SEND_B1;2RECV_F5;2SEND_F4;2RECV_B2)GROUP         # 1F1B k=4
    2F5 2B2 (2SEND_B2;5RECV_F3;2SEND_F5)GROUP                  # 1F1B k=5
    5F3 5B3 (5SEND_B3;5RECV_F4)GROUP                           # 1F1B k=6
    5F4 5B4 (5SEND_B4;5RECV_F5)GROUP                           # 1F1B k=7
    5F5 5B5 (5SEND_B5;2RECV_B3)GROUP                           # 1F1B k=8
    2B3 (2SEND_B3;2RECV_B4)GROUP                               # cooldown k=9
    2B4 (2SEND_B4;2RECV_B5)GROUP                               # cooldown k=10
    2B5 (2SEND_B5)GROUP                                               # cooldown k=11
}
