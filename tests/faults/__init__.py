"""Fault injection (issue 40): each test here failed on the code before the issue.

Where each point of the issue is tested:

1. a model file and its manifest written as a pair, interrupted or concurrent:
   test_files.py (``..._interrupted_between_the_two_writes...``, ``two_writers...``,
   ``...another_process_replaced...``, ``sigkill_between_the_two_writes...``)
2. an edited source in a sweep: test_sweep.py (``an_edited_source...``,
   ``...training_set_is_in_its_hash``)
3. damaged, misnamed and foreign rows, a second driver: test_sweep.py
4. the driver killed with SIGKILL: test_sweep.py (``workers_die_with_a_killed_driver...``,
   ``without_prctl...``)
5. SIGTERM mid-write: test_files.py (``sigterm_during_a_pair_write...``)
6. memory under a set limit: test_limits.py (the watchdog, the missing estimates),
   test_parse.py (a parse's estimate, peak RSS), test_files.py (declared sizes)
7. the long one-line expression: test_parse.py (``deep_circ_expression...``,
   ``long_one_line_expression_under_a_cap...``)
8. each traceback case: test_files.py (sidecar named "", deep nesting), test_parse.py
   (a MemoryError mid-parse), test_limits.py (torch's and onnxruntime's allocation errors)
9. reports that overstate: test_limits.py (coverage, complete, sweep rows, empty --inputs)
10. the smaller holes: test_files.py, test_parse.py, test_sweep.py

``make fuzz`` runs the hostile files of points 6, 7, 8 and 10 as seeds
(tests/core/syntax/test_fuzz_parsers.py, tests/core/modelfile/test_fuzz_models.py).
"""
