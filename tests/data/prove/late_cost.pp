# 1F1B with a cost that turns negative from P=11: the compiler refuses the file there, so the
# proof must refute it at P=11, M=1 (the sweep stops at P=8).
schedule late_cost(P = 4, M = 8) {
  require P >= 1 else "1F1B needs at least one rank",
          M >= 1 else "1F1B needs at least one microbatch"
  stages P
  place loop
  cost F = 10 - P
  rank r {
    let warm = min(P - 1 - r, M)  # forwards before the first backward
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
