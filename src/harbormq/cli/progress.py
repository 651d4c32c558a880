"""Progress on the console: restart phases, media recovery, pipeline jobs."""

from __future__ import annotations

from .consoles import LazyConsole


def make_progress_callback(con):
    """A restart progress bar per phase on an interactive console, else nothing."""
    if not con.is_terminal:
        return None
    if isinstance(con, LazyConsole):
        con = con.real()
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
    bars = Progress(TextColumn("{task.description:<20}", markup=False), BarColumn(),
                    TaskProgressColumn(),
                    console=con, transient=False)
    tasks: dict[str, int] = {}

    def progress(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            if not tasks:
                bars.start()
            tasks[phase] = bars.add_task(phase, total=max(total, 1))
        bars.update(tasks[phase], completed=done, total=max(total, 1))
        if phase == "backward recovery" and done >= total:
            bars.stop()
    return progress
