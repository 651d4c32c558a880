"""What the tests share: helpers imported as ``support.<module>`` (tests/conftest.py
puts tests/ on sys.path) and the child programs the harnesses run by path
(crash_workload.py, stomp_crash_workload.py, lazyfs.py)."""
