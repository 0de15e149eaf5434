"""Writes the demo corpus's Office files and scanned page with each format's own library
(python-docx, python-pptx, openpyxl; Pillow for the page, as a scanner's 300 dpi image):

    .venv/bin/python examples/office/make_office_files.py

The files are committed; this script says how they were made. Core properties carry a fixed
date, so a rerun writes the same content."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from docx import Document
from openpyxl import Workbook
from pptx import Presentation

OUT = Path(__file__).resolve().parents[1] / "corpus" / "office"
WHEN = dt.datetime(2026, 11, 2, 9, 30)


def docx(path: Path) -> None:
    doc = Document()
    doc.core_properties.title = "G2 gripper maintenance schedule"
    doc.core_properties.author = "Northwind Robotics Field Service"
    doc.core_properties.created = doc.core_properties.modified = WHEN
    doc.add_heading("G2 gripper maintenance schedule", level=1)
    doc.add_paragraph("This schedule applies to every G2 gripper mounted on an NR-7 arm. Intervals "
                      "count operating hours from the gripper's own counter, not calendar days.")
    doc.add_heading("Daily checks", level=2)
    for item in ("Wipe the finger pads with isopropyl alcohol and check them for cuts.",
                 "Run the grip self-test from the pendant and confirm 40 N at full close.",
                 "Listen for a clicking gearbox while the fingers open and close."):
        doc.add_paragraph(item, style="List Bullet")
    doc.add_heading("Service intervals", level=2)
    rows = [("Task", "Interval (hours)", "Parts"), ("Replace finger pads", "500", "GP-204 pad set"),
            ("Re-grease the lead screw", "1,000", "Molykote EM-30L"),
            ("Replace the gearbox", "8,000", "GB-17 gearbox kit"),
            ("Recalibrate the force sensor", "2,000", "none")]
    table = doc.add_table(rows=len(rows), cols=3)
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    doc.add_heading("After a crash", level=2)
    doc.add_paragraph("A gripper that hit a fixture at speed is taken out of service until the force "
                      "sensor is recalibrated and the fingers are checked for bending (tolerance 0.2 mm).")
    doc.save(path)


def pptx(path: Path) -> None:
    deck = Presentation()
    deck.core_properties.title = "Fleet review, Q3 2026"
    deck.core_properties.author = "Operations"
    deck.core_properties.created = deck.core_properties.modified = WHEN
    slides = [
        ("Fleet review, Q3 2026", ["142 Courier C1 robots in 9 warehouses", "Availability 98.7 % (target 98.5 %)"],
         "Open with the availability number; the target was raised in Q2."),
        ("Incidents", ["FleetOS controller outage on 14 August: 47 minutes",
                       "Two gripper crashes, both after firmware 4.2.1"],
         "The outage runbook was rewritten after this; see the on-call handbook."),
        ("Calibration drift", ["Arm warm-up before calibration cut drift by 60 %",
                               "Warm-up is now 15 minutes at 30 % speed"],
         "Questions usually come up here: the warm-up applies to every NR-7 arm."),
        ("Next quarter", ["Roll out firmware 4.3 to all grippers", "Add 20 robots in Lyon"], ""),
    ]
    for title, bullets, notes in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        body = slide.placeholders[1].text_frame
        body.text = bullets[0]
        for bullet in bullets[1:]:
            body.add_paragraph().text = bullet
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    deck.save(path)


def xlsx(path: Path) -> None:
    book = Workbook()
    book.properties.title = "Spare parts"
    book.properties.creator = "Northwind Robotics Field Service"
    book.properties.created = book.properties.modified = WHEN
    parts = book.active
    parts.title = "Parts"
    parts.append(["Part no", "Name", "Fits", "Unit price (EUR)", "In stock"])
    catalog = [("GP-204", "Finger pad set", "G2 gripper", 38.5, 120),
               ("GB-17", "Gearbox kit", "G2 gripper", 412.0, 14),
               ("FS-3", "Force sensor", "G2 gripper", 265.0, 9),
               ("EN-7", "Joint encoder", "NR-7 arm", 189.0, 22),
               ("BR-2", "Brake module", "NR-7 arm", 540.0, 6),
               ("WH-5", "Drive wheel", "Courier C1", 74.0, 48),
               ("LB-1", "Lidar bracket", "Courier C1", 21.0, 60),
               ("BT-48", "Battery pack 48 V", "Courier C1", 980.0, 11)]
    for row in catalog:
        parts.append(list(row))
    suppliers = book.create_sheet("Suppliers")
    suppliers.append(["Supplier", "Parts", "Lead time (days)"])
    for row in (("Kessler Antriebe", "GB-17, BR-2", 21), ("Optima Sensorik", "FS-3, EN-7", 35),
                ("Rolltec", "WH-5", 10)):
        suppliers.append(list(row))
    book.save(path)


def scanned_page(path: Path) -> None:
    from PIL import Image, ImageDraw, ImageFont

    text = ["SAFETY NOTICE 2026-07", "",
            "Before entering a robot cell, press the cell's stop button",
            "and wait until the amber light is steady.",
            "Never reach past the light curtain while an arm is moving.",
            "Report every near miss to the safety officer on duty."]
    font = ImageFont.truetype("DejaVuSans.ttf", 50)  # 12 pt at 300 dpi
    page = Image.new("L", (2480, 1200), 255)  # A4 width at 300 dpi
    draw = ImageDraw.Draw(page)
    for i, line in enumerate(text):
        draw.text((200, 150 + i * 110), line, font=font, fill=0)
    page.save(path, dpi=(300, 300))


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    docx(OUT / "g2-maintenance-schedule.docx")
    pptx(OUT / "fleet-review-q3.pptx")
    xlsx(OUT / "spare-parts.xlsx")
    scanned_page(OUT / "safety-notice-scan.png")
