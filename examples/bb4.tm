# bb4: the 4-state, 2-symbol busy beaver champion, 1RB1LB_1LA0LC_1RZ1LD_1RD0RA.
#
# Started on a blank tape it halts after 107 steps (bbchallenge convention: the
# transition into the halting state Z counts) leaving 13 ones (sigma 13).
#
# input: ''
# output: 10111111111111
# outcome: halt
# steps: 107
# sigma: 13

machine bb4 {
  alphabet: 0 1
  blank: 0
  states: A B C D Z
  start: A
  halt: Z

  A 0 -> 1 R B
  A 1 -> 1 L B
  B 0 -> 1 L A
  B 1 -> 0 L C
  C 0 -> 1 R Z
  C 1 -> 1 L D
  D 0 -> 1 R D
  D 1 -> 0 R A
}
