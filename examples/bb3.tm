# bb3: the 3-state, 2-symbol busy beaver champion for steps, 1RB1RZ_1LB0RC_1LC1LA.
#
# Started on a blank tape it halts after 21 steps (the transition into the halting
# state Z counts, as in bbchallenge) leaving 5 ones (sigma 5).
#
# input: ''
# output: 11111
# outcome: halt
# steps: 21
# sigma: 5

machine bb3 {
  alphabet: 0 1
  blank: 0
  states: A B C Z
  start: A
  halt: Z

  A 0 -> 1 R B
  A 1 -> 1 R Z
  B 0 -> 1 L B
  B 1 -> 0 R C
  C 0 -> 1 L C
  C 1 -> 1 L A
}
