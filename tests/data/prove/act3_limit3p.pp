# 1F1B with activations of size 3 and a limit of 3 x P: within it at every setting
# (rank r holds 3 x min(P - r, M)).
schedule act3_limit3p(P = 4, M = 8) {
  require P >= 1 else "1F1B needs at least one rank",
          M >= 1 else "1F1B needs at least one microbatch"
  stages P
  place loop
  memory act = 3, limit = 3 * P
  rank r {
    let warm = min(P - 1 - r, M)  # forwards before the first backward
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
