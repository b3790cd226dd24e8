# 1F1B whose rank 0 skips its warm-up from M=50: a hang from P=3, M=50, far beyond the sweep.
# The timing search meets that setting; it must be a refutation, not unknown (issue 17).
schedule warmup_from_50(P = 4, M = 8) {
  require P >= 1 else "1F1B needs at least one rank",
          M >= 1 else "1F1B needs at least one microbatch"
  stages P
  place loop
  rank r {
    let warm = (M >= 50 and r == 0) ? 0 : min(P - 1 - r, M)  # forwards before the first backward
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
