# 1F1B with a memory limit of 19: rank 0 holds min(P, M) activations, so check fails from
# P=20, M=20 on (issue 17: prove once called this proved for every setting).
schedule limit_19(P = 4, M = 8) {
  require P >= 1 else "1F1B needs at least one rank",
          M >= 1 else "1F1B needs at least one microbatch"
  stages P
  place loop
  memory limit = 19
  rank r {
    let warm = min(P - 1 - r, M)  # forwards before the first backward
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
