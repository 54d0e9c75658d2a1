# even_ones: accepts a binary string with an even number of 1s; four states.
#
# Scans right once, keeping the parity of the 1s seen in its state, and erases
# nothing; at the first blank it accepts (even) or rejects (odd).
#
# input: 1011
# output: 1011
# outcome: reject
# steps: 5
#
# Also: 0110 -> outcome accept.

machine even_ones {
  alphabet: 0 1 _
  blank: _
  start: even
  accept: yes
  reject: no
  even 0 -> * R even
  even 1 -> * R odd
  odd 0  -> * R odd
  odd 1  -> * R even
  even _ -> * S yes
  odd _  -> * S no
}
