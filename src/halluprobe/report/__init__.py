"""The report: one self-contained HTML page and its Markdown twin from run dirs (page.py: what is
rendered; build.py, view.py: what it shows; chair_page.py, decoding_section.py: the caption side)."""
