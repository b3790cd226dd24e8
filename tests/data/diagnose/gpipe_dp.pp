# GPipe as a job of two identical replicas, FSDP-style: it runs to its end.
schedule gpipe_dp(P = 2, M = 2) {
  stages P
  replicas 2
  place loop
  rank r {
    UNSHARD(r)
    for m in 0 .. M { F(r, m) }
    for m in 0 .. M { B(r, m) }
    REDUCE_GRAD(r)
    RESHARD(r)
  }
}
