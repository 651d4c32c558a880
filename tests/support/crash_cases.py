"""Crash points reached outside the crash harness's load."""

#: the media crash points and the call that reaches them (test_crash checks that
#: every crash point is exercised somewhere)
MEDIA_CRASH_CASES = [("media.mid_swap", "recreate"), ("media.mid_image:2", "image")]
