# 1F1B whose messages have a size: receive buffers count towards the limit, which the proof's
# activation count does not model, so the limit must come out unknown, never proved.
schedule sized_messages(P = 4, M = 8) {
  require P >= 1 else "1F1B needs at least one rank",
          M >= 1 else "1F1B needs at least one microbatch"
  stages P
  place loop
  memory limit = 100, out = 1
  rank r {
    let warm = min(P - 1 - r, M)  # forwards before the first backward
    for m in 0 .. warm     { F(r, m) }
    for m in 0 .. M - warm { F(r, m + warm); B(r, m) }
    for m in M - warm .. M { B(r, m) }
  }
}
