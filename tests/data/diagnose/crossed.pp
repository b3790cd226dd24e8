# Rank 1 waits for microbatch 1's activation before it sends microbatch 0's gradient, while
# rank 0 sends microbatch 1's activation only after microbatch 0's backward.
schedule crossed(P = 2, M = 2) {
  stages P
  place loop
  rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 0F1 0SEND_F1 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1
}
