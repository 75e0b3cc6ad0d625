"""Headless Chromium for the page and formgrader tests (Debian's chromium + chromium-driver)."""
import shutil

import pytest


def find_chromium():
    for browser in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(browser)
        if path:
            return path, shutil.which("chromedriver")
    return None, None


def start_browser(width=1100, height=900):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary, driver = find_chromium()
    if not (binary and driver):
        pytest.skip("headless Chromium is not installed: run ./setup.sh (apt-get install chromium chromium-driver)")
    options = Options()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(driver))


def full_page_screenshot(browser, path, width):
    """Resize to the page's height, then save a PNG of all of it."""
    browser.set_window_size(width, 900)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, min(height + 40, 8000))
    browser.save_screenshot(str(path))
    return path
