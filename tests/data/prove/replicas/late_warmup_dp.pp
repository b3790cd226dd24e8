# late_warmup (tests/data/prove/late_warmup.pp) as a job of D identical replicas: every replica's
# pipeline hangs for M < P (from P=3, M=2), so the job does, whatever D.
schedule late_warmup_dp(P = 4, M = 8, D = 2) {
  require P >= 1, M >= 1, D >= 1
  stages P
  replicas D
  place loop
  rank r {
    let warm = M < P ? min(r, M) : P - 1 - r
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
    REDUCE_GRAD(r)
  }
}
