"""Helpers of the web console's browser tests (tests/http/test_console.py,
tests/qsg/test_console_group.py): log in, go to a view, read a table's column,
click a row's action (twice for one that asks to confirm) and read the
action's answer from the actions panel."""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

WAIT_S = 15


def wait_for(browser, what, timeout: float = WAIT_S):
    """The first truthy value of ``what(browser)`` (exceptions are retried)."""
    return WebDriverWait(browser, timeout, poll_frequency=0.1,
                         ignored_exceptions=(Exception,)).until(what)


def log_in(browser, srv, user: str, password: str, view: str = "overview") -> None:
    scheme = "https" if getattr(srv, "ca", None) else "http"
    base = f"{scheme}://127.0.0.1:{srv.web_port}/console/"
    browser.get(base)
    browser.execute_script("sessionStorage.clear()")
    browser.get(base + f"#{view}")
    browser.refresh()
    wait_for(browser, lambda b: b.find_element(By.ID, "login").is_displayed())
    browser.find_element(By.ID, "login-user").send_keys(user)
    browser.find_element(By.ID, "login-password").send_keys(password)
    browser.find_element(By.ID, "login-submit").click()


def show(browser, view: str) -> None:
    """Go to ``view`` and wait for its first read."""
    browser.execute_script("location.hash = arguments[0]", view)
    wait_for(browser, lambda b: b.find_element(By.ID, "view").get_attribute("data-view")
             == view.split("/")[0] and b.find_element(By.ID, "view").text)


# read in one script: the page replaces its tables on every read, so an element
# found a moment before may be gone
def figure(browser, key: str) -> str:
    return browser.execute_script(
        "const f = document.querySelector(`.card[data-figure='${arguments[0]}'] .figure`);"
        "return f ? f.innerText : null", key)


def column(browser, table: str, key: str) -> list[str]:
    return browser.execute_script(
        "return [...document.querySelectorAll(`#${arguments[0]} tbody "
        "td[data-key='${arguments[1]}']`)].map(td => td.innerText)", table, key)


def last_action(browser, command: str) -> dict:
    """The activity entry of ``command`` once it has an answer."""
    return wait_for(browser, lambda b: b.execute_script(
        "const e = [...document.querySelectorAll('#activity li.action')]"
        ".find(li => li.dataset.command === arguments[0] && li.dataset.cc !== undefined);"
        "return e ? {cc: e.dataset.cc, reason: e.dataset.reason, status: e.dataset.status,"
        " text: e.innerText} : null", command))


def click_action(browser, table: str, row: str, label: str) -> None:
    """Click the button ``label`` of ``row`` (twice for one that asks to confirm).
    Found and clicked in one step, retried: the page replaces its rows as it reads."""
    def click(prefix: str):
        def attempt(b):
            for btn in b.find_elements(By.CSS_SELECTOR, f"#{table} tr[data-name='{row}'] button"):
                if btn.text == prefix + label:
                    confirm = btn.get_attribute("data-confirm") == "1"
                    btn.click()
                    return "confirm" if confirm and not prefix else "done"
            return None
        return wait_for(browser, attempt)
    if click("") == "confirm":
        click("Confirm: ")
