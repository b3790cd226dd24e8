# 1F1B (schedules/1f1b.pp) as a data-parallel job: D identical replicas, each rank reducing its
# stage's gradients after its last backward.
schedule 1f1b_dp(P = 4, M = 8, D = 2) {
  require P >= 1, M >= 1, D >= 1
  stages P
  replicas D
  place loop
  rank r {
    let warm = min(P - 1 - r, M)
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
    REDUCE_GRAD(r)
  }
}
