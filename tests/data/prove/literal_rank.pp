# 1F1B with the last rank written out for P = 2 only: rank 1's own list
schedule special(P = 2, M = 2) {
  require P == 2, M == 2
  stages P
  place loop
  rank 1: 1F0 1B0 1F1 1B1
  rank r {
    let warm = min(P - 1 - r, M)
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
