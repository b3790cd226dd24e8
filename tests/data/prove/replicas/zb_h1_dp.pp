# ZB-H1 (schedules/zb_h1.pp) as a data-parallel job of D identical replicas, each rank reducing its
# stage's gradients after its last W.
schedule zb_h1_dp(P = 4, M = 8, D = 2) {
  require P >= 1, M >= 1, D >= 1
  stages P
  replicas D
  place loop
  rank r {
    let warm = min(P - 1 - r, M)
    for k in 0 .. M + warm {
      if k < M { F(r, k) }
      if k >= warm {
        I(r, k - warm)
        if k - warm >= r { W(r, k - warm - r) }
      }
    }
    for m in max(0, M - r) .. M { W(r, m) }
    REDUCE_GRAD(r)
  }
}
