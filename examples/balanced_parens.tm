# balanced_parens: accepts strings of ( and ) in which the parentheses balance.
#
# Finds the first ')' and crosses it out (X), goes left to the nearest '(' and
# crosses that out too, and repeats.  A ')' without a '(' to its left rejects.
# When no ')' is left, any '(' still on the tape rejects; otherwise accept.
#
# input: (()())
# output: XXXXXX
# outcome: accept
# steps: 28
#
# Also: ())( -> outcome reject (state no).

machine balanced_parens {
  alphabet: ( ) X _
  blank: _
  start: find
  accept: yes
  reject: no

  find ( X -> * R *          # look for the first ')'
  find )   -> X L match
  find _   -> _ L check      # no ')' left

  match X  -> * L *          # look left for its '('
  match (  -> X R find
  match _  -> _ S no         # a ')' with no '('

  check X  -> * L *          # any '(' left over?
  check (  -> * S no
  check _  -> _ S yes
}
