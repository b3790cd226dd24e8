# 1F1B with activations of size 3 and a limit of 30: over it from P=11, M=11 (rank 0 holds
# 3 x 11 = 33); prove once called this proved for every setting (issue 17).
schedule act3_limit30(P = 4, M = 8) {
  require P >= 1 else "1F1B needs at least one rank",
          M >= 1 else "1F1B needs at least one microbatch"
  stages P
  place loop
  memory act = 3, limit = 30
  rank r {
    let warm = min(P - 1 - r, M)  # forwards before the first backward
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
