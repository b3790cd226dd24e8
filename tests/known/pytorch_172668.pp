# pytorch/pytorch#172668: in the steady state both ranks send before they receive. On one node
# NCCL buffers the small messages and it runs; across two nodes sends rendezvous and it hangs.
schedule pytorch_172668 {
  rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
}
