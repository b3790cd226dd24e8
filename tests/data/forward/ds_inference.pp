# DeepSpeed's InferenceSchedule (deepspeed/runtime/pipe/schedule.py) as a forward-only schedule:
# at step t, stage r runs microbatch t - r, and sends the output it made the step before. Even
# stages send before they receive, odd stages receive before they send, so that blocking sends
# cannot wait on each other.
schedule ds_inference(P = 4, M = 8) {
  forward only
  stages P
  place loop
  rank r {
    for t in 0 .. M + P - 1 {
      let m = t - r
      let sent = t - r - 1
      if r % 2 == 0 {
        if sent >= 0 and sent < M and r < P - 1 { SEND_F(r, sent) }
        if m >= 0 and m < M and r > 0 { RECV_F(r, m) }
      } else {
        if m >= 0 and m < M and r > 0 { RECV_F(r, m) }
        if sent >= 0 and sent < M and r < P - 1 { SEND_F(r, sent) }
      }
      if m >= 0 and m < M { F(r, m) }
    }
  }
}
