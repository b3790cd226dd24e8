# Two replicas of 1F1B; replica 1 leaves its gradients unreduced.
schedule skipped_reduce(P = 2, M = 3) {
  stages P
  place loop
  replicas 2
  rank r, replica d {
    let warm = min(P - 1 - r, M)
    for m in 0 .. warm { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm) B(r, m) }
    for m in M - warm .. M { B(r, m) }
    if d == 0 { REDUCE_GRAD(r) }
  }
}
