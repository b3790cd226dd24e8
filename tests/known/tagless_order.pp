# Tagless point-to-point messages pair by order: rank 0 sends microbatch 1's activation first,
# rank 1 receives microbatch 0's first, so F(1,0) silently computes on microbatch 1's data.
schedule tagless_order {
  rank 0: 0F0 0F1 0SEND_F1 0SEND_F0 0RECV_B0 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1RECV_F1 1F0 1F1 1B0 1SEND_B0 1B1 1SEND_B1
}
