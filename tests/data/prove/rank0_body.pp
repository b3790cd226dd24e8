# rank 0 gets its own body (the same 1F1B order, written for rank 0)
schedule special2(P = 4, M = 8) {
  require P >= 1, M >= 1
  stages P
  place loop
  rank 0 {
    let warm = min(P - 1, M)
    for m in 0 .. warm     { F(0, m) }
    for m in 0 .. M - warm { F(0, m + warm); B(0, m) }
    for m in M - warm .. M { B(0, m) }
  }
  rank r {
    let warm = min(P - 1 - r, M)
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
