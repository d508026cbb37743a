"""Render the sample report ``data/arden-microgrids-report.pdf``.

The report "Arden Valley Community Microgrids: 2025 Field Report" is an
original, entirely fictional document written for the langchain-fusion
project as test data for hybrid (vector + keyword) retrieval. Every name,
product, figure and event in it is invented.

Usage (from the repository root)::

    pip install reportlab
    python scripts/make_sample_pdf.py

Output is deterministic (reportlab ``invariant=1``): re-running the script
produces a byte-identical PDF.

Layout contract: every chapter fits on exactly one page, so chapter N
(counting the executive summary as chapter 0) is PDF page N + 1.
``data/queries.json`` labels relevant pages by number, so the script
fails loudly if an edit makes a chapter spill onto a second page.
"""

from __future__ import annotations

import sys
from pathlib import Path

from reportlab.lib.enums import TA_CENTER
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import cm
from reportlab.platypus import (
    PageBreak,
    Paragraph,
    Preformatted,
    SimpleDocTemplate,
    Spacer,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT = REPO_ROOT / "data" / "arden-microgrids-report.pdf"

TITLE = "Arden Valley Community Microgrids: 2025 Field Report"
FOOTER = "Arden Valley Rural Energy Cooperative - 2025 Field Report"

# ---------------------------------------------------------------------------
# Report text.
#
# Each chapter is (heading, [blocks]); a block is one of
#   ("p", text)      body paragraph (reportlab mini-markup: <b>, <i>, &amp;)
#   ("h2", text)     sub-heading
#   ("table", text)  fixed-width table, rendered line by line in Courier
#   ("title", text) / ("subtitle", text)   title-page lines
# ---------------------------------------------------------------------------

CHAPTERS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Executive Summary",
        [
            ("title", TITLE),
            (
                "subtitle",
                (
                    "Prepared by the Technical Office of the Arden Valley Rural Energy "
                    "Cooperative (AVREC)<br/>Reporting period 1 January to 31 December 2025 "
                    "| Document reference AVREC-FR-2025-01 | Issued February 2026"
                ),
            ),
            (
                "subtitle",
                (
                    "<i>Sample document: the cooperative, its villages, people, products and "
                    "figures are fictional and were written as test data for the "
                    "langchain-fusion project.</i>"
                ),
            ),
            (
                "p",
                (
                    "The Arden Valley Rural Energy Cooperative operates six solar and battery "
                    "microgrids serving 784 households, 41 small businesses and 9 public "
                    "buildings in the upper Arden Valley. Together the sites have 350 kWp of "
                    "photovoltaic capacity and 1,400 kWh of battery storage. In 2025 the fleet "
                    "delivered 412 MWh to members, 9 percent more than in 2024, and the "
                    "weighted average supply availability was 98.1 percent."
                ),
            ),
            (
                "p",
                (
                    "The year was shaped by one event above all others. Between 6 and 9 July, "
                    "monsoon rains pushed the Sedge River over its banks and flooded the "
                    "battery house at Fennel Reach. The village was without cooperative power "
                    "for nine days. The batteries themselves survived because they had been "
                    "mounted on steel rails, but two inverters and the site controller were "
                    "lost. Chapter 6 describes the flood and the recovery in detail."
                ),
            ),
            (
                "p",
                (
                    "There was also good news. The sodium-ion pilot at Tarnwick and Fennel "
                    "Reach completed its second full year and did better than expected in hot "
                    "weather. The Village Energy Technician programme certified sixteen new "
                    "technicians, and repairs are now much faster because there is a trained "
                    "person in each village. A faulty controller firmware release in April, "
                    "which briefly threatened every site at once, taught us to stage software "
                    "updates one site at a time."
                ),
            ),
            (
                "p",
                (
                    "The cooperative closed the year with an operating surplus of $56,700, of "
                    "which $25,000 was placed in the battery replacement reserve. Our main "
                    "recommendations for 2026 are to raise every battery house above the "
                    "highest recorded flood level, to extend sodium-ion storage to Milsett, "
                    "and to hire a second regional engineer for the upstream villages. All "
                    "money figures in this report are US dollar equivalents."
                ),
            ),
            ("h2", "Key figures for 2025"),
            (
                "table",
                """\
Member households served ............ 784
Solar PV capacity ................... 350 kWp
Battery storage ..................... 1,400 kWh (952 kWh LFP, 448 kWh sodium-ion)
Energy delivered to members ......... 412 MWh
Weighted supply availability ........ 98.1 percent
Mean time to repair (site visits) ... 11 hours
Operating surplus ................... $56,700""",
            ),
        ],
    ),
    (
        "Chapter 1. The Cooperative and Its Six Villages",
        [
            (
                "p",
                (
                    "AVREC was founded in 2019 by residents of Brackenford who were tired of "
                    "relying on one overloaded diesel generator and on kerosene lamps. It is a "
                    "member-owned cooperative: every connected household holds one share and "
                    "one vote at the annual general meeting, which in 2025 was held on 15 March "
                    "in the Brackenford school hall and attended by 311 members. A seven-person "
                    "board oversees a staff of nine, including the technical office that "
                    "prepared this report."
                ),
            ),
            (
                "p",
                (
                    "The six villages lie along forty kilometres of the Arden Valley, strung "
                    "out beside the Sedge River and the single gravel road that follows it. "
                    "Brackenford, the largest, sits at the valley mouth and hosts the "
                    "cooperative office, the central spare-parts store and the training shed. "
                    "Holloway Cross and Milsett are the middle villages, about an hour away by "
                    "road. Tarnwick and Fennel Reach lie low on the river flats further "
                    "upstream. Oskerby, the smallest and most remote, is perched on a hillside "
                    "at the head of the valley, two and a half hours from Brackenford in the "
                    "dry season and sometimes unreachable by vehicle during the rains."
                ),
            ),
            ("h2", "Site overview"),
            (
                "table",
                """\
Village          Households  PV (kWp)  Storage (kWh)  Chemistry    Inverters
---------------  ----------  --------  -------------  -----------  -----------
Brackenford             212        96            384  LFP          2 x KV-5500
Holloway Cross          148        64            256  LFP          2 x KV-3300
Milsett                  97        42            168  LFP          1 x KV-3300
Tarnwick                120        54            210  Sodium-ion   2 x KV-3300
Oskerby                  76        36            144  LFP          1 x KV-3300
Fennel Reach            131        58            238  Sodium-ion   2 x KV-3300
---------------  ----------  --------  -------------  -----------  -----------
Total                   784       350          1,400""",
            ),
            (
                "p",
                (
                    "Across the six sites this amounts to 350 kWp of solar panels and a "
                    "combined 1,400 kWh of battery storage. Each village grid is an isolated "
                    "low-voltage network; none is connected to the national grid, whose "
                    "nearest line ends at the market town of Corran, 60 kilometres to the "
                    "south. Power is distributed by aerial bundled cable on wooden poles, with "
                    "23.5 kilometres of line in total. Every household has a prepaid smart "
                    "meter, and larger consumers such as mills and workshops have three-phase "
                    "connections."
                ),
            ),
            (
                "p",
                (
                    "Responsibility for each site is shared. Every village elects a two-person "
                    "energy committee that handles complaints, follows up disputed payments "
                    "and organises the dry-season panel cleaning rota. The technical office in "
                    "Brackenford handles design, procurement and any work that needs a "
                    "qualified electrician."
                ),
            ),
        ],
    ),
    (
        "Chapter 2. Solar Generation and Battery Storage",
        [
            (
                "p",
                (
                    "All six sites use ground-mounted monocrystalline panels rated at 545 "
                    "watts, installed on fixed steel frames tilted at 15 degrees towards the "
                    "south. Arrays are divided into strings of 14 panels. In 2025 the arrays "
                    "produced on average 4.3 kWh per installed kWp per day, falling to 2.9 kWh "
                    "per kWp during the monsoon months of July and August."
                ),
            ),
            ("h2", "Lithium iron phosphate"),
            (
                "p",
                (
                    "Two battery chemistries are in service. Four sites use lithium iron "
                    "phosphate (LFP) storage built from Halvorsen HL-8 rack modules, each "
                    "holding 8 kWh at a nominal 51.2 volts. LFP was chosen in 2019 for its long "
                    "cycle life, its tolerance of deep daily cycling and its good safety record "
                    "compared with other lithium chemistries. The LFP fleet totals 952 kWh "
                    "across Brackenford, Holloway Cross, Milsett and Oskerby. The oldest "
                    "modules, at Brackenford, were installed in November 2019 and still held "
                    "91 percent of their rated capacity at the capacity test in October 2025."
                ),
            ),
            ("h2", "Sodium-ion pilot"),
            (
                "p",
                (
                    "In 2023 the cooperative began a sodium-ion pilot at Tarnwick and Fennel "
                    "Reach using Solvane NX-14 cabinets, each storing 14 kWh. Tarnwick has "
                    "fifteen cabinets (210 kWh) and Fennel Reach seventeen (238 kWh), giving "
                    "448 kWh of sodium-ion storage in total. Sodium-ion cells contain no "
                    "lithium, cobalt or nickel, they can be stored and shipped at zero volts, "
                    "and their usable capacity falls off less in hot weather. Their drawbacks "
                    "are a lower energy density, which means the cabinets need roughly 40 "
                    "percent more floor space than LFP racks of the same capacity, and a "
                    "shorter track record in the field."
                ),
            ),
            ("h2", "Operating limits"),
            (
                "p",
                (
                    "Battery rooms at all sites are ventilated concrete-block buildings with "
                    "steel roofs. Batteries are operated between 15 and 95 percent state of "
                    "charge, and the site controller holds back a 20 percent evening reserve "
                    "so that essential loads, such as the clinic refrigerator at Milsett, can "
                    "be carried through to sunrise. In 2025 the average battery completed 0.82 "
                    "full equivalent cycles per day."
                ),
            ),
            (
                "p",
                (
                    "Cycling is deepest in the weeks before the monsoon, when evening demand "
                    "for fans is highest, and shallowest in the cool months of December and "
                    "January. Capacity tests are run every 18 months on each site by "
                    "discharging one battery string at a time into the village load while the "
                    "other strings stand by."
                ),
            ),
        ],
    ),
    (
        "Chapter 3. Inverters and Site Control",
        [
            (
                "p",
                (
                    "Power conversion at every site is handled by hybrid inverters made by "
                    "Korvale Energy Systems. The smaller sites use the KV-3300, a 30 kVA "
                    "three-phase unit, while Brackenford uses two of the larger KV-5500, rated "
                    "at 50 kVA. Ten Korvale inverters are in service, and one spare KV-3300 is "
                    "kept at the Brackenford store. Where two inverters share a site they run "
                    "in parallel with droop-based load sharing, so that either unit can carry "
                    "the village alone, at reduced capacity, if its partner fails."
                ),
            ),
            ("h2", "The GC-9 site controller"),
            (
                "p",
                (
                    "Each site is coordinated by a Tessary GC-9 site controller, a small "
                    "industrial computer that decides when to charge or discharge the "
                    "batteries, when to curtail solar output and which loads to shed when the "
                    "state of charge runs low. The GC-9 talks to the inverters over Modbus TCP "
                    "and to the battery management systems (BMS) over CAN bus, and it reports "
                    "to the cooperative office through a cellular modem. At the start of 2025 "
                    "all controllers ran firmware version 4.1.7."
                ),
            ),
            ("h2", "Load priorities"),
            (
                "p",
                (
                    "Load shedding follows three priority levels. Priority 1 loads, which are "
                    "the health post at Milsett, the village water pumps and the community "
                    "phone-charging kiosks, are never shed. Priority 3 loads, the productive-use "
                    "connections such as mills and welders, are disconnected first, when the "
                    "state of charge falls to 35 percent. Priority 2 loads, the households, are "
                    "curtailed at 25 percent by limiting each meter to 300 watts."
                ),
            ),
            ("h2", "Remote monitoring"),
            (
                "p",
                (
                    "Remote monitoring has changed the way the technical office works. Every "
                    "GC-9 uploads a summary every five minutes to the cooperative's monitoring "
                    "dashboard, which staff have nicknamed Kestrel. Alarms are sent as text "
                    "messages to the duty technician. In 2025 about 70 percent of alarms were "
                    "cleared remotely, without a site visit, mostly by resetting an inverter or "
                    "adjusting a charging setpoint."
                ),
            ),
            ("h2", "Protection and earthing"),
            (
                "p",
                (
                    "Each site has Type 1+2 surge protection devices on the AC side and Type 2 "
                    "devices in every PV combiner box. Earth resistance is measured once a year "
                    "at every site and must be below 10 ohms. Inverter and controller "
                    "enclosures are bonded to the same earth bar as the battery racks."
                ),
            ),
        ],
    ),
    (
        "Chapter 4. Fault Codes and Alarm Handling",
        [
            (
                "p",
                (
                    "The KV-series inverters and the GC-9 controller share a common fault-code "
                    "scheme. Codes beginning with F are faults that stop the inverter or "
                    "isolate a battery string. Codes beginning with W are warnings: they are "
                    "logged and sent to the duty technician but do not interrupt supply. The "
                    "table lists the codes most often seen in the Arden Valley fleet, with the "
                    "number of occurrences recorded in 2025."
                ),
            ),
            (
                "table",
                """\
Code   Meaning                               Typical cause                         2025
-----  ------------------------------------  ------------------------------------  ----
F-101  DC bus overvoltage                    Sudden load drop at high solar output    7
F-118  Cell voltage imbalance above 45 mV    Weak module or loose balancing lead      5
F-207  PV insulation fault, below 400 kOhm   Damaged cable or water in combiner box   9
F-233  Inverter heatsink above 85 C          Blocked air intake or failed fan         4
F-312  Frequency outside 47.5 to 52.0 Hz     Large motor start on an overloaded site  3
F-350  BMS communication lost for 30 s       Loose CAN connector or controller reset 12
F-404  Contactor weld detected               Worn AC output contactor                 1
W-021  Cooling fan speed low                 Dust build-up on fan blades             18
W-066  State of charge below evening reserve Several cloudy days in a row            26""",
            ),
            ("h2", "The most common fault: F-350"),
            (
                "p",
                (
                    "F-350 was the most frequent fault of 2025. In almost every case the cause "
                    "was mechanical rather than electronic: the CAN connectors on the older "
                    "battery racks work loose gradually as the building heats and cools each "
                    "day. Since August technicians have secured the connectors with cable ties "
                    "during routine visits, and the monthly count has fallen from an average "
                    "of 1.6 to 0.4."
                ),
            ),
            ("h2", "Warnings matter"),
            (
                "p",
                (
                    "Warnings should not be ignored just because they do not interrupt supply. "
                    "A W-021 fan warning left unattended at Holloway Cross in January developed "
                    "into the F-233 over-temperature trip described in Chapter 5. The technical "
                    "office now requires every W-021 to be followed by a visit within seven "
                    "days. W-066 is the one warning that needs no visit; it simply tells the "
                    "duty technician to expect household curtailment that evening."
                ),
            ),
            ("h2", "Clearing faults"),
            (
                "p",
                (
                    "F-101, F-233 and F-312 reset automatically once the condition has cleared, "
                    "up to three times in an hour; after the third trip the inverter locks out "
                    "and must be reset at the site. F-118, F-207 and F-404 always require a "
                    "technician on site, because they may indicate a safety hazard. F-350 may "
                    "be cleared remotely once the BMS link has been restored. Detailed field "
                    "procedures are given in the cooperative's maintenance handbook."
                ),
            ),
        ],
    ),
    (
        "Chapter 5. Incidents and Outages in 2025",
        [
            (
                "p",
                (
                    "Six incidents in 2025 were serious enough to be reviewed by the board. "
                    "They are summarised below in date order."
                ),
            ),
            (
                "p",
                (
                    "<b>14 February 2025, Holloway Cross.</b> Inverter 2 tripped on F-233 "
                    "during an unusually hot afternoon. The root cause was a cooling fan that "
                    "had been reporting W-021 for three weeks, together with a wasp nest in the "
                    "air intake. The village stayed supplied by inverter 1 at reduced capacity, "
                    "but productive-use loads were shed for 19 hours until the fan was replaced "
                    "the next morning."
                ),
            ),
            (
                "p",
                (
                    "<b>3 April 2025, Milsett.</b> Controller firmware 4.2.1 was pushed "
                    "remotely to all six GC-9 controllers on the same evening. At Milsett the "
                    "controller entered a reboot loop, raising repeated F-350 alarms, and the "
                    "village was without power for 9 hours until a technician drove out and "
                    "rolled the firmware back to 4.1.7. The other five sites were rolled back "
                    "remotely before their batteries ran low. The vaccine refrigerator at the "
                    "health post stayed cold on its own small backup battery."
                ),
            ),
            (
                "p",
                (
                    "<b>22 May 2025, Oskerby.</b> The single KV-3300 reported F-404, contactor "
                    "weld, and shut down. With no second inverter on site the whole village "
                    "lost supply. The spare unit was delayed by a washed-out stretch of road, "
                    "and power was restored after 27 hours."
                ),
            ),
            (
                "p",
                (
                    "<b>6 to 9 July 2025, Fennel Reach and Tarnwick.</b> Monsoon flood, "
                    "described in Chapter 6. Fennel Reach was without cooperative power for "
                    "nine days; Tarnwick was switched off for 14 hours as a precaution."
                ),
            ),
            (
                "p",
                (
                    "<b>19 September 2025, Tarnwick.</b> Sodium-ion cabinet 7 raised F-118 "
                    "with a cell voltage spread of 62 mV. The cabinet was isolated and the "
                    "site ran on the remaining 196 kWh until the supplier replaced a faulty "
                    "balancing board under warranty in October."
                ),
            ),
            (
                "p",
                (
                    "<b>2 November 2025, Brackenford.</b> Lightning struck near the PV array "
                    "during an evening storm. The surge protector in combiner box 3 failed "
                    "sacrificially, as designed, and two strings reported F-207. The strings "
                    "returned to service on 5 November after a damaged cable was replaced."
                ),
            ),
            ("h2", "Repair times"),
            (
                "p",
                (
                    "Leaving the flood aside, the mean time to repair for incidents that "
                    "needed a site visit was 11 hours in 2025, against 26 hours in 2023, before "
                    "there was a trained person in each village. In total the "
                    "cooperative logged 23 unplanned outages during the year, most of them "
                    "shorter than one hour."
                ),
            ),
        ],
    ),
    (
        "Chapter 6. The July Monsoon Flood",
        [
            (
                "p",
                (
                    "The monsoon came late in 2025, and then it came all at once. Over the 48 "
                    "hours from the evening of 6 July, the rain gauge at the Tarnwick school "
                    "recorded 212 millimetres of rain, more than had fallen in the whole of "
                    "June. By the early hours of 7 July the Sedge River had risen higher than "
                    "anything the oldest residents could remember, and it had begun to spread "
                    "across the flats below Tarnwick and Fennel Reach."
                ),
            ),
            (
                "p",
                (
                    "At Fennel Reach the battery house stands some 80 metres from the river "
                    "bank, on a concrete plinth 25 centimetres high that had been considered "
                    "adequate when the site was designed in 2022. Water entered the building "
                    "shortly after 02:00 and eventually rose to 38 centimetres above the floor. "
                    "The duty technician, woken by an alarm from the site controller, talked "
                    "the village technician through a shutdown by phone, and the inverters "
                    "were isolated at 02:40. Nobody was hurt, and the district fire service "
                    "later praised the decision to cut supply before the water reached live "
                    "equipment."
                ),
            ),
            (
                "p",
                (
                    "When the water went down on 9 July the team found a mixed picture. The "
                    "seventeen sodium-ion cabinets had been mounted on steel rails 45 "
                    "centimetres above the floor at the supplier's suggestion, and every one "
                    "of them stayed dry. The two KV-3300 inverters, which were wall-mounted "
                    "lower down, and the GC-9 controller in its floor-standing enclosure had "
                    "been under water and had to be written off, along with the distribution "
                    "board and the metering panel. Everything was coated in mud and silt."
                ),
            ),
            (
                "p",
                (
                    "Recovery took a week. The spare KV-3300 from Brackenford was driven up as "
                    "soon as the road reopened, a second unit was borrowed from the supplier's "
                    "regional depot, and a replacement controller was configured at the "
                    "cooperative office. While the work went on, the district council lent a "
                    "40 kVA diesel generator that powered the water pump and the school for "
                    "six hours each evening. Full cooperative supply returned to Fennel Reach "
                    "on 16 July, nine days after the shutdown."
                ),
            ),
            (
                "p",
                (
                    "Tarnwick was luckier. Its battery house stands on higher ground, and "
                    "although the water came within a few metres of the door, it never got "
                    "inside. The site was switched off for 14 hours as a precaution while the "
                    "river peaked. Even so, the flood cost the cooperative $44,600 in repairs, "
                    "replacement equipment and temporary power, by far the largest unplanned "
                    "expense of the year."
                ),
            ),
            (
                "p",
                (
                    "Residents of Fennel Reach spent the days after the flood helping one "
                    "another dig out homes and dry stored grain, and several households with "
                    "relatives in Tarnwick moved there until power returned. The energy "
                    "committee kept a daily noticeboard at the school with news of the repair "
                    "work, which members later said had done much to keep tempers calm."
                ),
            ),
        ],
    ),
    (
        "Chapter 7. Tariffs, Metering and Revenue",
        [
            (
                "p",
                (
                    "Tariffs are set each year by the board and approved at the annual general "
                    "meeting. The structure is designed to keep basic lighting, phone charging "
                    "and a fan affordable for every household, while asking larger users to "
                    "pay closer to the real cost of supply. The 2025 tariff was adopted on 15 "
                    "March and took effect on 1 April."
                ),
            ),
            (
                "table",
                """\
Tariff component                                    Rate (USD)
--------------------------------------------------  ------------------
Monthly connection fee                              3.00 per month
Lifeline block, first 20 kWh per month              0.20 per kWh
Standard block, 21 to 100 kWh per month             0.42 per kWh
High block, above 100 kWh per month                 0.55 per kWh
Productive use, solar hours 10:00 to 15:00          0.30 per kWh
Productive use, all other hours                     0.58 per kWh""",
            ),
            ("h2", "The productive-use tariff"),
            (
                "p",
                (
                    "The productive-use tariff is one of the cooperative's most successful "
                    "ideas. Because midday energy is cheaper than evening energy, mills, "
                    "welders and the fish cold room are encouraged to run while the sun is "
                    "shining and the batteries are already full, instead of drawing on stored "
                    "energy after dark. Since the tariff was introduced in 2023, the share of "
                    "productive-use consumption falling inside solar hours has risen from 38 "
                    "percent to 71 percent."
                ),
            ),
            ("h2", "Prepaid metering"),
            (
                "p",
                (
                    "All customers have prepaid meters of the VoltPass PM-2 type. Members buy "
                    "credit through mobile money or from a village agent and receive a "
                    "20-digit token, which they type into the meter keypad. The meter beeps "
                    "when credit falls below one day of typical use. A household that runs out "
                    "of credit keeps a 30 watt emergency allowance for up to 48 hours, enough "
                    "for a light and a phone charger."
                ),
            ),
            ("h2", "Revenue and losses"),
            (
                "p",
                (
                    "In 2025 the six sites sold 412 MWh and collected $186,400 in tariff and "
                    "connection revenue. Because the meters are prepaid, arrears are small. "
                    "The main loss is energy theft through meter bypasses, which fell to an "
                    "estimated 1.8 percent of delivered energy after the energy committees "
                    "introduced a reward for reporting it. Average household consumption was "
                    "26 kWh per month, and the median household bill was $9.10 per month."
                ),
            ),
        ],
    ),
    (
        "Chapter 8. Maintenance Programme",
        [
            (
                "p",
                (
                    "Preventive maintenance follows a fixed calendar so that every site gets "
                    "the same attention however remote it is. Routine tasks are split between "
                    "the village technicians, who are on site every day, and the two "
                    "cooperative engineers, who visit each site at least once a quarter."
                ),
            ),
            (
                "table",
                """\
Interval          Task                                              Done by
----------------  ------------------------------------------------  --------------------
Daily             Remote check of alarms and state of charge        Duty technician
Weekly            Visual walk-round and meter kiosk check           Village technician
Fortnightly       Panel cleaning (dry season, November to May)      Village cleaning rota
Monthly           Download BMS logs, inspect CAN connectors         Village technician
Quarterly         Thermal imaging of battery and AC terminals       Cooperative engineer
Every 6 months    Replace inverter air filters, check fans          Cooperative engineer
Annually          Insulation and earth resistance tests             Cooperative engineer
Every 18 months   Full battery capacity test                        Cooperative engineer""",
            ),
            ("h2", "Panel cleaning"),
            (
                "p",
                (
                    "Panel cleaning is the most visible maintenance task and the one most "
                    "often done by volunteers. Dust from the valley road and pollen in spring "
                    "can cut array output by as much as 12 percent within a month. Panels are "
                    "washed with soft brushes and clean water only, early in the morning while "
                    "the glass is cool. Detergents and pressure washers are not allowed, "
                    "because they damage the anti-reflective coating."
                ),
            ),
            ("h2", "Thermal imaging"),
            (
                "p",
                (
                    "Thermal imaging, introduced in 2024, has proved its worth. A handheld "
                    "camera shows loose or corroded terminals as hot spots long before they "
                    "fail. In 2025 the quarterly surveys found 14 terminals running more than "
                    "15 degrees above their neighbours; all of them were cleaned and "
                    "re-torqued."
                ),
            ),
            ("h2", "Spares and planned outages"),
            (
                "p",
                (
                    "Spare parts are held centrally at Brackenford, and each site keeps a "
                    "small kit of fuses, fans, a CAN cable and a spare meter. After the "
                    "Oskerby contactor failure in May, a spare AC contactor was added to the "
                    "site kits at the two single-inverter villages, Milsett and Oskerby."
                ),
            ),
            (
                "p",
                (
                    "Planned maintenance outages are announced to members by text message at "
                    "least five days in advance and are scheduled for late morning, when "
                    "demand is low and the batteries are charging."
                ),
            ),
        ],
    ),
    (
        "Chapter 9. The Village Energy Technician Programme",
        [
            (
                "p",
                (
                    "The Village Energy Technician (VET) programme trains local residents to "
                    "operate and look after their own village microgrid. Before it existed, "
                    "nearly every fault needed an engineer to drive out from Brackenford, "
                    "which for Oskerby could mean a whole day lost on the road. The programme "
                    "is run jointly with the electrical department of Corran Polytechnic, "
                    "which accredits the certificates."
                ),
            ),
            ("h2", "The 2025 intake"),
            (
                "p",
                (
                    "The 2025 intake of 18 trainees, three from each village, began on 12 May. "
                    "Eleven of the 18 were women, the highest proportion so far, following an "
                    "outreach campaign led by the women's tailoring collective at Holloway "
                    "Cross. Trainees received a stipend of $140 per month during the course "
                    "and a basic tool kit which they keep when they finish."
                ),
            ),
            ("h2", "Course structure"),
            (
                "p",
                (
                    "The course has two levels. Level 1 is a six-week full-time block in the "
                    "training shed at Brackenford, covering electrical safety, lockout "
                    "procedures, metering and customer service, panel cleaning and basic fault "
                    "finding with the alarm dashboard. Level 2 adds twelve weeks of part-time "
                    "study and supervised field work on battery systems, inverter resets and "
                    "insulation testing. Only Level 2 technicians may clear F-series faults on "
                    "site."
                ),
            ),
            ("h2", "Results"),
            (
                "p",
                (
                    "Sixteen of the 18 trainees passed the Level 1 assessment in June; one "
                    "withdrew for family reasons and one will resit in 2026. Nine technicians "
                    "from the 2024 and 2025 cohorts had completed Level 2 by December. Every "
                    "village now has at least one Level 2 technician living locally. Having a "
                    "trained person in each village is the main reason repair times fell so "
                    "sharply during the year."
                ),
            ),
            ("h2", "Safety record"),
            (
                "p",
                (
                    "Safety remains the foundation of the programme. There were no lost-time "
                    "injuries in 2025. One near miss was reported in August, when a trainee "
                    "began to open a combiner box without first checking that it was isolated. "
                    "The supervising engineer stopped the work at once, and the event has since "
                    "been used as a teaching case for every later group."
                ),
            ),
            (
                "p",
                (
                    "Graduates are paid a monthly retainer by the cooperative and a call-out "
                    "fee for night-time work. Several have also found private work wiring "
                    "homes and shops, which the cooperative encourages as long as it is "
                    "inspected before connection."
                ),
            ),
        ],
    ),
    (
        "Chapter 10. Life on the Microgrid: Community Impact",
        [
            (
                "p",
                (
                    "Numbers on a dashboard tell only part of the story. During the year the "
                    "technical office interviewed residents in all six villages to understand "
                    "how reliable electricity is changing daily life. A few themes came up "
                    "again and again."
                ),
            ),
            (
                "p",
                (
                    "Health care is the clearest example. The health post at Milsett now keeps "
                    "childhood vaccines in a solar-powered refrigerator instead of fetching "
                    "them from Corran on the morning of each clinic. The nurse in charge told "
                    "us that immunisation sessions, which used to be held once a month, now "
                    "take place every week, and that births in the evening are no longer "
                    "attended by torchlight."
                ),
            ),
            (
                "p",
                (
                    "Schooling has changed too. Pupils in Brackenford and Tarnwick study in "
                    "the evening under electric light, and the Tarnwick secondary school "
                    "opened a computer room with twelve laptops in September. Teachers say "
                    "that more homework is being handed in, although they are careful to "
                    "credit several causes rather than electricity alone."
                ),
            ),
            (
                "p",
                (
                    "Small businesses are growing around the grids. Oskerby's grain mill, "
                    "which used to run on diesel, changed to an electric motor in 2024 and now "
                    "grinds during solar hours at the productive-use rate; the owner says this "
                    "has halved his running costs. At Holloway Cross the women's tailoring "
                    "collective works with electric sewing machines and now takes orders from "
                    "traders in Corran. At Fennel Reach a fish cold room shared by twenty "
                    "fishing households means the catch can be sold on market days rather "
                    "than the same afternoon."
                ),
            ),
            (
                "p",
                (
                    "Not every effect has been welcome. Some older residents feel that the "
                    "evening quiet of the villages has been lost to televisions and music, "
                    "and in Brackenford there have been complaints about street lights left "
                    "burning all night near the market. The energy committees have taken "
                    "these concerns to the board, and a dimming schedule for street lights "
                    "will be tried in 2026."
                ),
            ),
            (
                "p",
                (
                    "Perhaps the most telling remark came from a farmer in Milsett, who said "
                    "that he no longer thinks about electricity at all. For a service that "
                    "was once an uncertain luxury, that is exactly the outcome the cooperative "
                    "hopes for."
                ),
            ),
        ],
    ),
    (
        "Chapter 11. Financial Summary",
        [
            (
                "p",
                (
                    "The cooperative's accounts for 2025 were audited by Pell &amp; Rourke, a "
                    "chartered accounting firm in Corran, and approved by the board on 28 "
                    "January 2026. The summary below shows operating income and expenditure; "
                    "capital spending on new assets is reported separately in the audited "
                    "accounts."
                ),
            ),
            (
                "table",
                """\
Income                                              USD
------------------------------------------  -----------
Tariff and connection revenue                   186,400
Northmere Rural Fund operating grant             60,000
Total income                                    246,400

Expenditure                                         USD
------------------------------------------  -----------
Staff salaries and benefits                      72,300
Flood recovery at Fennel Reach                   44,600
Spare parts and consumables                      31,800
Training programme (VET)                         18,900
Vehicle fuel and transport                       12,400
Insurance                                         9,700
Total expenditure                               189,700

Operating surplus                                56,700""",
            ),
            (
                "p",
                (
                    "Tariff income rose by 11 percent compared with 2024, driven by higher "
                    "consumption from productive users and by the April tariff adjustment. "
                    "The grant from the Northmere Rural Fund is the third of five annual "
                    "instalments. It is conditional on running the training programme and on "
                    "keeping supply availability above 97 percent, a condition met in 2025 "
                    "despite the flood."
                ),
            ),
            (
                "p",
                (
                    "The flood recovery figure covers the two written-off KV-3300 inverters, "
                    "the replacement GC-9 controller, electrical repairs, cleaning and fuel for "
                    "the borrowed generator. The cooperative's insurance policy excluded flood "
                    "damage to equipment installed below one metre above ground, so no claim "
                    "could be made. Nobody had noticed this exclusion when the policy was "
                    "renewed; Chapter 13 deals with it."
                ),
            ),
            (
                "p",
                (
                    "Of the operating surplus, $25,000 was transferred to the battery "
                    "replacement reserve, which now stands at $118,000. The LFP modules at "
                    "Brackenford are expected to need replacing around 2031. The remaining "
                    "$31,700 has been set aside for the 2026 flood-proofing works."
                ),
            ),
        ],
    ),
    (
        "Chapter 12. Lessons Learned",
        [
            (
                "p",
                (
                    "Every difficult year teaches something. In December the technical office "
                    "held a review workshop with the board, both engineers and all the Level 2 "
                    "technicians. The following lessons were agreed."
                ),
            ),
            (
                "p",
                (
                    "<b>Design for the worst flood, not the last one.</b> The plinth height at "
                    "Fennel Reach was based on a decade of local memory, which turned out to be "
                    "a poor guide. The equipment that survived in July did so because it "
                    "happened to be mounted high, not because the building was designed for "
                    "flooding. Site designs must start from the worst credible water level, "
                    "with a margin on top."
                ),
            ),
            (
                "p",
                (
                    "<b>Never update every site at once.</b> The April firmware incident showed "
                    "that a single bad release sent to every controller together can put the "
                    "whole fleet at risk within an hour. Had the problem at Milsett shown "
                    "itself more slowly, all six villages could have gone dark overnight."
                ),
            ),
            (
                "p",
                (
                    "<b>Local skills shorten outages more than spare parts do.</b> Comparing "
                    "2023 with 2025, the biggest gain in repair times came not from a better "
                    "stock of parts but from having a trained person in each village who can "
                    "make the first diagnosis, send photographs and carry out a reset while an "
                    "engineer is on the way."
                ),
            ),
            (
                "p",
                (
                    "<b>Small warnings deserve attention.</b> The February over-temperature "
                    "trip at Holloway Cross began as a fan warning that had been on the "
                    "dashboard for weeks. Warnings are cheap to act on and expensive to "
                    "ignore."
                ),
            ),
            (
                "p",
                (
                    "<b>Sodium-ion has earned a wider role.</b> Over two years the sodium-ion "
                    "cabinets have kept their capacity about as well as the LFP racks, and "
                    "they performed noticeably better in the hottest weeks of April and May, "
                    "when the Tarnwick battery room regularly goes above 38 degrees. The one "
                    "balancing-board fault in September was handled quickly under warranty."
                ),
            ),
            (
                "p",
                (
                    "<b>Single points of failure hurt the smallest villages most.</b> Oskerby "
                    "and Milsett each depend on one inverter. The May outage at Oskerby lasted "
                    "more than a day, while a similar fault at a two-inverter site would "
                    "barely have been noticed."
                ),
            ),
            (
                "p",
                (
                    "<b>Read the insurance policy.</b> The flood exclusion had been in the "
                    "policy wording from the start, and nobody on the staff had read it "
                    "closely."
                ),
            ),
        ],
    ),
    (
        "Chapter 13. Recommendations and Plan for 2026",
        [
            (
                "p",
                (
                    "The board has accepted the following recommendations. Together they make "
                    "up a capital plan of $212,000 for 2026, to be funded from the surplus "
                    "set aside in 2025, the fourth Northmere instalment and a concessional "
                    "loan that is under negotiation."
                ),
            ),
            (
                "p",
                (
                    "<b>1. Flood-proof the river sites.</b> Raise the equipment platforms at "
                    "Fennel Reach and Tarnwick to at least 90 centimetres above the July 2025 "
                    "high-water mark by 31 March 2026, ahead of the next monsoon, and survey "
                    "the other four sites against the same standard."
                ),
            ),
            (
                "p",
                (
                    "<b>2. Stage every software update.</b> All controller and inverter "
                    "firmware will be installed first at Holloway Cross, chosen because it has "
                    "two inverters and is close to Brackenford, and rolled out to the other "
                    "sites only after 14 days of clean operation."
                ),
            ),
            (
                "p",
                (
                    "<b>3. Extend sodium-ion storage to Milsett.</b> Add 112 kWh of storage, "
                    "made up of eight Solvane NX-14 cabinets, alongside the existing LFP racks "
                    "to strengthen the evening reserve for the health post. Running two "
                    "chemistries on one site needs a controller configuration change that is "
                    "being tested with the supplier. Budget: $96,000."
                ),
            ),
            (
                "p",
                (
                    "<b>4. Remove single points of failure.</b> Install a second KV-3300 at "
                    "Oskerby in 2026 and at Milsett in 2027, so that no village depends on a "
                    "single inverter."
                ),
            ),
            (
                "p",
                (
                    "<b>5. Strengthen the team upstream.</b> Hire a second regional engineer, "
                    "based in Tarnwick, to cover Tarnwick, Fennel Reach and Oskerby."
                ),
            ),
            (
                "p",
                (
                    "<b>6. Fix the insurance gap.</b> Renegotiate the policy so that flood "
                    "damage is covered whatever the mounting height of the equipment."
                ),
            ),
            (
                "p",
                (
                    "<b>7. Keep training.</b> Run a 2026 VET intake of 12 trainees, with "
                    "priority for villages that have only one Level 2 technician."
                ),
            ),
            (
                "p",
                (
                    "The cooperative enters 2026 in a stronger position than it entered 2025. "
                    "The flood was a hard lesson, but the response to it showed what six small "
                    "villages can do when they own their own power supply and have the skills "
                    "to run it. The technical office will report progress against these "
                    "recommendations at the annual general meeting in March 2026."
                ),
            ),
        ],
    ),
]


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------

STYLES = {
    "h1": ParagraphStyle("h1", fontName="Helvetica-Bold", fontSize=16, leading=20, spaceAfter=10),
    "h2": ParagraphStyle(
        "h2",
        fontName="Helvetica-Bold",
        fontSize=11.5,
        leading=14,
        spaceBefore=6,
        spaceAfter=4,
    ),
    "p": ParagraphStyle("p", fontName="Helvetica", fontSize=10, leading=13.6, spaceAfter=7),
    "title": ParagraphStyle(
        "title",
        fontName="Helvetica-Bold",
        fontSize=20,
        leading=25,
        alignment=TA_CENTER,
        spaceAfter=10,
    ),
    "subtitle": ParagraphStyle(
        "subtitle",
        fontName="Helvetica",
        fontSize=9.5,
        leading=13,
        alignment=TA_CENTER,
        spaceAfter=8,
    ),
    "table": ParagraphStyle(
        "table",
        fontName="Courier",
        fontSize=8,
        leading=10.5,
        spaceBefore=4,
        spaceAfter=10,
    ),
}


class ReportDoc(SimpleDocTemplate):
    """Records the page on which each chapter heading lands."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.chapter_pages: list[int] = []

    def afterFlowable(self, flowable):
        if isinstance(flowable, Paragraph) and flowable.style.name == "h1":
            self.chapter_pages.append(self.page)


def draw_footer(canvas, doc):
    canvas.saveState()
    canvas.setFont("Helvetica", 8)
    canvas.setFillGray(0.35)
    canvas.drawString(2 * cm, 1.2 * cm, FOOTER)
    canvas.drawRightString(A4[0] - 2 * cm, 1.2 * cm, f"Page {doc.page}")
    canvas.restoreState()


def build_story():
    story = []
    for index, (heading, blocks) in enumerate(CHAPTERS):
        if index:
            story.append(PageBreak())
        # The title page shows the report title first and the heading after it.
        heading_done = False
        for kind, text in blocks:
            if kind in ("p", "h2") and not heading_done:
                story.append(Paragraph(heading, STYLES["h1"]))
                heading_done = True
            if kind == "table":
                story.append(Preformatted(text, STYLES["table"]))
            else:
                story.append(Paragraph(text, STYLES[kind]))
            if kind == "subtitle" and index == 0:
                story.append(Spacer(1, 2))
        if not heading_done:
            story.append(Paragraph(heading, STYLES["h1"]))
    return story


def main() -> int:
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    doc = ReportDoc(
        str(OUTPUT),
        pagesize=A4,
        leftMargin=2 * cm,
        rightMargin=2 * cm,
        topMargin=1.8 * cm,
        bottomMargin=2 * cm,
        title=TITLE,
        author="Arden Valley Rural Energy Cooperative (fictional)",
        subject="Fictional sample document for langchain-fusion retrieval tests",
        creator="scripts/make_sample_pdf.py",
        invariant=1,
        pageCompression=1,
    )
    doc.build(build_story(), onFirstPage=draw_footer, onLaterPages=draw_footer)

    expected = list(range(1, len(CHAPTERS) + 1))
    if doc.chapter_pages != expected or doc.page != len(CHAPTERS):
        print(
            "error: each chapter must fit on one page "
            f"(chapter start pages {doc.chapter_pages}, total pages {doc.page}); "
            "shorten the text so data/queries.json page labels stay valid",
            file=sys.stderr,
        )
        return 1
    size_kb = OUTPUT.stat().st_size / 1024
    print(f"wrote {OUTPUT.relative_to(REPO_ROOT)}: {doc.page} pages, {size_kb:.1f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
