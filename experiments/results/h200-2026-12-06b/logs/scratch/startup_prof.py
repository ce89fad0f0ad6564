"""The main thread's start-up under cProfile: run.py as `python run.py ...` runs it, the profile
stopped and written at the first train step's end (clock.end_startup), then the job goes on."""
import cProfile
import os
import runpy
import sys

from transformerop import clock

prof = cProfile.Profile()
_end = clock.end_startup


def end_startup():
    t = _end()
    prof.disable()
    prof.dump_stats(os.environ["OUT"] + "/startup.prof")
    return t


clock.end_startup = end_startup
sys.argv = ["run.py", *sys.argv[1:]]
prof.enable()
runpy.run_path("run.py", run_name="__main__")
