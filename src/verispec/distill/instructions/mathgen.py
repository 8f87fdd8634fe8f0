"""Programmatic math problems for the ``math`` family: arithmetic and word problems to be solved
step by step, drawn from many templates with a seeded RNG.

Each template returns the problem text and its answer; the answer is only used to check the
problem (it must not be readable in the prompt: a problem whose answer appears among its own
numbers is drawn again) and is never put in an instruction. The source of a problem is
``math:<template>``, so the held-out split keeps whole templates apart.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from fractions import Fraction
from typing import NamedTuple

from .topics import FIRST_NAMES

__all__ = ["MATH_TEMPLATES", "MathProblem", "math_problem", "numbers_in"]

Problem = tuple[str, str]  # (text, answer)


class MathProblem(NamedTuple):
    """A wrapped problem, the template it came from, and its answer (never shown in ``text``)."""

    template: str
    text: str
    answer: str


def fmt(x: float | Fraction | int) -> str:
    """A number as a person writes it: integers plain, others to at most 2 decimals."""
    if isinstance(x, Fraction) and x.denominator == 1:
        return str(x.numerator)
    v = float(x)
    if abs(v - round(v)) < 1e-9:
        return str(int(round(v)))
    return f"{v:.2f}".rstrip("0").rstrip(".")


def frac(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:/\d+)?")


def numbers_in(text: str) -> set[str]:
    """The numbers written in ``text`` (thousands separators removed), as strings."""
    return set(_NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3})", "", text)))


_MONEY = (("dollars", "$"), ("euros", "EUR"), ("pounds", "GBP"))
_ITEMS = ("notebook", "backpack", "lamp", "pair of boots", "kettle", "board game", "jacket", "bicycle helmet",
          "desk chair", "coffee grinder", "rain coat", "set of pans", "watch", "tent", "printer")
_FOODS = ("apples", "oranges", "muffins", "bread rolls", "eggs", "bananas", "pears", "croissants", "lemons")


def _name(r: random.Random) -> str:
    return r.choice(FIRST_NAMES)


def _money(r: random.Random) -> str:
    return r.choice(_MONEY)[0]


def t_order_of_ops(r: random.Random) -> Problem:
    e, q = r.randint(3, 19), r.randint(4, 40)
    a, b, c, d = r.randint(10, 90), r.randint(5, 60), r.randint(2, 12), e * q
    form = r.randrange(3)
    if form == 0:
        return f"Evaluate {a} + {b} × {c} − {d} ÷ {e}.", fmt(a + b * c - q)
    if form == 1:
        return f"Calculate ({a} − {b}) × {c} + {d} ÷ {e}.", fmt((a - b) * c + q)
    return f"What is {c} × ({a} + {b}) − {d} ÷ {e}?", fmt(c * (a + b) - q)


def t_long_multiplication(r: random.Random) -> Problem:
    a, b = r.randint(101, 989), r.randint(12, 97)
    return f"Multiply {a} by {b} using long multiplication.", fmt(a * b)


def t_long_division(r: random.Random) -> Problem:
    b = r.randint(6, 48)
    a = b * r.randint(20, 400) + r.randint(1, b - 1)
    return f"Divide {a} by {b}. Give the quotient and the remainder.", f"{a // b} remainder {a % b}"


def t_fraction_sum(r: random.Random) -> Problem:
    fs = [Fraction(r.randint(1, d - 1), d) for d in r.sample([2, 3, 4, 5, 6, 8, 9, 10, 12], 3)]
    sign = r.choice(["+", "−"])
    total = fs[0] + fs[1] + fs[2] if sign == "+" else fs[0] + fs[1] - fs[2]
    return (f"Work out {frac(fs[0])} + {frac(fs[1])} {sign} {frac(fs[2])} and simplify the result.", frac(total))


def t_fraction_product(r: random.Random) -> Problem:
    a, b = Fraction(r.randint(1, 11), r.randint(2, 12)), Fraction(r.randint(1, 11), r.randint(2, 12))
    if r.random() < 0.5:
        return f"Multiply {frac(a)} by {frac(b)} and reduce to lowest terms.", frac(a * b)
    return f"Divide {frac(a)} by {frac(b)}. Write the answer as a simplified fraction.", frac(a / b)


def t_decimals(r: random.Random) -> Problem:
    a, b = r.randint(11, 99) / 10, r.randint(11, 99) / 10
    op = r.randrange(3)
    if op == 0:
        return f"Compute {a} × {b} without a calculator.", fmt(a * b)
    if op == 1:
        c = r.randint(101, 999) / 100
        return f"Add {a}, {b} and {c}, then subtract 1.25.", fmt(a + b + c - 1.25)
    return f"What is {fmt(a * 4)} divided by 0.4?", fmt(a * 10)


def t_percent_of(r: random.Random) -> Problem:
    p, x = r.choice([5, 12, 15, 18, 25, 35, 40, 65, 75, 120]), r.randint(4, 90) * 20
    return f"What is {p}% of {x}?", fmt(p * x / 100)


def t_percent_change(r: random.Random) -> Problem:
    old = r.randint(8, 80) * 5
    p = r.choice([4, 8, 10, 12, 15, 20, 25, 30, 40, 60])
    up = r.random() < 0.5
    new = old * (100 + p) / 100 if up else old * (100 - p) / 100
    item = r.choice(_ITEMS)
    word = "rose" if up else "fell"
    return (f"The price of a {item} {word} from {old} to {fmt(new)} {_money(r)}. By what percentage did it change?",
            f"{p}%")


def t_discount(r: random.Random) -> Problem:
    price, p = r.randint(6, 60) * 5, r.choice([10, 15, 20, 30, 35, 40, 50])
    n = r.randint(2, 4)
    item = r.choice(_ITEMS)
    return (f"{_name(r)} buys {n} of the same {item}, each priced at {price} {_money(r)}, during a sale "
            f"with {p}% off everything. How much is paid in total?", fmt(n * price * (100 - p) / 100))


def t_tip(r: random.Random) -> Problem:
    bill, tip, people = r.randint(40, 240), r.choice([10, 12, 15, 18, 20]), r.randint(2, 6)
    return (f"A group of {people} friends has a dinner bill of {bill} {_money(r)}. They add a {tip}% tip and "
            f"split the total equally. How much does each person pay?", fmt(bill * (100 + tip) / 100 / people))


def t_simple_interest(r: random.Random) -> Problem:
    p, rate, years = r.randint(5, 80) * 100, r.choice([2, 3, 4, 5, 6]), r.randint(2, 9)
    return (f"{_name(r)} borrows {p} {_money(r)} at a simple interest rate of {rate}% per year. How much interest "
            f"is owed after {years} years?", fmt(p * rate * years / 100))


def t_compound_growth(r: random.Random) -> Problem:
    p, rate, years = r.randint(5, 50) * 200, r.choice([2, 4, 5, 6, 7, 10]), r.randint(2, 4)
    return (f"An investment of {p} {_money(r)} grows by {rate}% each year, with the growth added to the "
            f"balance. What is it worth after {years} years, to the nearest cent?",
            f"{p * (1 + rate / 100) ** years:.2f}")


def t_speed(r: random.Random) -> Problem:
    v, t = r.randint(8, 30) * 5, r.choice([1.5, 2, 2.5, 3, 4, 0.75])
    form = r.randrange(3)
    who = r.choice(["A bus", "A delivery van", "A ferry", "A motorbike", "A coach"])
    if form == 0:
        return f"{who} travels at a steady {v} km/h for {fmt(t)} hours. How far does it go?", fmt(v * t)
    if form == 1:
        return f"{who} covers {fmt(v * t)} km in {fmt(t)} hours. What is its average speed?", fmt(v) + " km/h"
    return f"How long does {who.lower()} need for {fmt(v * t)} km at an average of {v} km/h?", fmt(t) + " hours"


def t_arrival(r: random.Random) -> Problem:
    h, m = r.randint(5, 16), r.choice(range(0, 60, 5))
    speed = r.choice([60, 75, 80, 90, 100, 120])
    minutes = r.randint(45, 300)
    dist = speed * minutes / 60
    if abs(dist - round(dist)) > 1e-9:
        minutes = 60 * r.randint(1, 4)
        dist = speed * minutes // 60
    end = h * 60 + m + minutes
    vehicle = r.choice(["coach", "regional train", "car", "night bus"])
    return (f"A {vehicle} sets off at {h:02d}:{m:02d} on a {fmt(dist)} km journey and averages {speed} km/h. "
            f"When does it get there?", f"{end // 60 % 24:02d}:{end % 60:02d}")


def t_work_rate(r: random.Random) -> Problem:
    a, b = r.choice([(2, 3), (3, 6), (4, 12), (6, 12), (5, 20), (10, 15), (4, 6), (12, 24)])
    who = r.choice([("One pipe", "a second pipe", "fill a tank"), ("One painter", "another painter", "paint a fence"),
                    ("A small pump", "a large pump", "empty a pond"), ("One machine", "a newer machine",
                                                                      "pack an order")])
    return (f"{who[0]} takes {a} hours to {who[2]}; {who[1]} takes {b} hours. Working together, how long do "
            f"they need?", fmt(Fraction(a * b, a + b)) + " hours")


def t_ages_sum(r: random.Random) -> Problem:
    young, gap, k = r.randint(4, 30), r.randint(2, 30), r.randint(2, 10)
    a, b = _name(r), _name(r)
    while b == a:
        b = _name(r)
    total = 2 * young + gap + 2 * k
    return (f"{a} is {gap} years older than {b}. In {k} years their ages will add up to {total}. "
            f"How old is {b} now?", fmt(young))


def t_ages_ratio(r: random.Random) -> Problem:
    child, mult = r.randint(3, 15), r.choice([3, 4, 5])
    years = child * (mult - 2)
    a = _name(r)
    return (f"{a}'s aunt is {mult} times as old as {a}. In {years} years she will be twice {a}'s age. "
            f"How old is {a} today?", fmt(child))


def t_change(r: random.Random) -> Problem:
    a, b = r.randint(2, 6), r.randint(2, 5)
    pa, pb = r.randint(3, 30) / 4, r.randint(5, 40) / 4
    note = next(n for n in (20, 50, 100) if n > a * pa + b * pb)
    fa, fb = r.sample(_FOODS, 2)
    cur = _money(r)
    return (f"{_name(r)} buys {a} bags of {fa} at {fmt(pa)} {cur} each and {b} boxes of {fb} at {fmt(pb)} {cur} "
            f"each, paying with a {note} {cur} note. How much change comes back?", fmt(note - a * pa - b * pb))


_CONVERSIONS = (
    ("kilometres", "miles", Fraction(621371, 1000000)), ("miles", "kilometres", Fraction(1609344, 1000000)),
    ("kilograms", "pounds", Fraction(220462, 100000)), ("litres", "millilitres", 1000), ("hours", "minutes", 60),
    ("metres", "centimetres", 100), ("square metres", "square centimetres", 10000), ("days", "hours", 24),
    ("gigabytes", "megabytes", 1000), ("inches", "centimetres", Fraction(254, 100)),
)


def t_units(r: random.Random) -> Problem:
    if r.random() < 0.3:
        c = r.randint(-10, 40)
        if r.random() < 0.5:
            return f"Convert {c} degrees Celsius to Fahrenheit.", fmt(c * 9 / 5 + 32) + " °F"
        f = r.randint(20, 110)
        return f"Convert {f} °F to degrees Celsius, to one decimal place.", f"{(f - 32) * 5 / 9:.1f} °C"
    src, dst, k = r.choice(_CONVERSIONS)
    x = r.randint(2, 250) if r.random() < 0.7 else r.randint(11, 99) / 10
    return f"How many {dst} are there in {fmt(x)} {src}?", fmt(Fraction(str(x)) * k)


def t_recipe(r: random.Random) -> Problem:
    base, want = r.choice([(2, 5), (4, 6), (6, 9), (3, 8), (8, 12), (4, 10), (5, 2)])
    flour, milk = r.randint(4, 30) * 25, r.randint(2, 12) * 50
    dish = r.choice(["pancakes", "a lentil soup", "a batch of scones", "a fruit crumble", "a curry"])
    return (f"{dish.capitalize()} for {base} people needs {flour} g of the main dry ingredient and {milk} ml of "
            f"liquid. What amounts are needed to serve {want}?",
            f"{fmt(Fraction(flour * want, base))} g and {fmt(Fraction(milk * want, base))} ml")


def t_geometry(r: random.Random) -> Problem:
    form = r.randrange(5)
    a, b, c = r.randint(3, 40), r.randint(3, 40), r.randint(2, 20)
    if form == 0:
        return (f"A room measures {a} m by {b} m. What is its floor area and its perimeter?",
                f"{a * b} m², {2 * (a + b)} m")
    if form == 1:
        return (f"Find the area of a circle with a radius of {c} cm, using 3.14 for pi.",
                fmt(Fraction(314, 100) * c * c) + " cm²")
    if form == 2:
        return f"A box is {a} cm long, {b} cm wide and {c} cm tall. What is its volume?", f"{a * b * c} cm³"
    if form == 3:
        return (f"A triangle has a base of {a} m and a height of {b} m. What is its area?",
                fmt(Fraction(a * b, 2)) + " m²")
    k = r.choice([(3, 4, 5), (5, 12, 13), (8, 15, 17), (6, 8, 10), (7, 24, 25), (9, 12, 15)])
    return (f"A ladder reaches {k[1]} m up a wall and its foot is {k[0]} m from the wall. How long is the ladder?",
            f"{k[2]} m")


def _signed(c: int) -> str:
    return f"+ {c}" if c >= 0 else f"− {-c}"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def t_linear(r: random.Random) -> Problem:
    x, a, b = r.randint(-12, 20), r.randint(2, 11), r.randint(-30, 30)
    c = a * x + b
    if r.random() < 0.5:
        return f"Solve for x: {a}x {_signed(b)} = {c}.", f"x = {x}"
    d = r.randint(1, a - 1)
    return f"Find x if {a}x {_signed(b)} = {d if d > 1 else ''}x {_signed(c - d * x)}.", f"x = {x}"


def t_system(r: random.Random) -> Problem:
    x, y = r.randint(-9, 15), r.randint(-9, 15)
    a, b, c, d = r.randint(1, 6), r.randint(1, 6), r.randint(1, 6), r.randint(-6, -1)
    if a * d - b * c == 0:
        d -= 1
    return (f"Solve the system of equations: {a}x + {b}y = {a * x + b * y} and {c}x − {-d}y = {c * x + d * y}.",
            f"x = {x}, y = {y}")


def t_mean_median(r: random.Random) -> Problem:
    vals = [r.randint(40, 100) for _ in range(r.choice([5, 6, 7]))]
    what = r.choice(["test scores", "daily step counts in hundreds", "weights in kilograms", "minutes of practice"])
    s = sorted(vals)
    n = len(s)
    med = Fraction(s[n // 2]) if n % 2 else Fraction(s[n // 2 - 1] + s[n // 2], 2)
    return (f"These are {_name(r)}'s {what}: {', '.join(map(str, vals))}. Find the mean and the median.",
            f"mean {fmt(Fraction(sum(vals), n))}, median {fmt(med)}")


def t_ratio_share(r: random.Random) -> Problem:
    a, b = r.sample(range(1, 8), 2)
    unit = r.randint(5, 60)
    total = unit * (a + b)
    x, y = _name(r), _name(r)
    return (f"{x} and {y} share {total} {_money(r)} in the ratio {a}:{b}. How much does each of them get?",
            f"{unit * a} and {unit * b}")


def t_unit_price(r: random.Random) -> Problem:
    g1, g2 = r.choice([(250, 400), (300, 500), (500, 750), (400, 1000), (200, 350)])
    p1, p2 = r.randint(12, 60) / 10, r.randint(15, 90) / 10
    k1, k2 = p1 / g1 * 1000, p2 / g2 * 1000
    better = "the first" if k1 < k2 else "the second"
    thing = r.choice(["coffee", "cheese", "rice", "pasta", "cereal"])
    return (f"One pack of {thing} weighs {g1} g and costs {fmt(p1)} {_money(r)}; another weighs {g2} g and costs "
            f"{fmt(p2)}. Which pack is cheaper per kilogram, and by how much?", better)


def t_duration(r: random.Random) -> Problem:
    h, m = r.randint(8, 21), r.randint(0, 59)
    lh, lm = r.randint(0, 3), r.randint(5, 55)
    end = h * 60 + m + lh * 60 + lm
    event = r.choice(["A concert", "A football match with breaks", "A film", "A workshop", "A ferry crossing"])
    return (f"{event} begins at {h:02d}:{m:02d} and lasts {lh} h {lm} min. At what time does it end?",
            f"{end // 60 % 24:02d}:{end % 60:02d}")


def t_wage(r: random.Random) -> Problem:
    rate, hours, extra = r.randint(11, 35), r.choice([35, 37, 38, 40]), r.randint(2, 12)
    mult = r.choice([Fraction(3, 2), Fraction(5, 4), 2])
    mult_s = {Fraction(3, 2): "one and a half times", Fraction(5, 4): "1.25 times", 2: "double"}[mult]
    return (f"{_name(r)} earns {rate} {_money(r)} an hour for the first {hours} hours of a week and {mult_s} that "
            f"rate for every hour beyond. How much is earned in a week of {hours + extra} hours?",
            fmt(rate * hours + rate * mult * extra))


def t_fuel(r: random.Random) -> Problem:
    use, dist, price = r.choice([4.5, 5, 5.5, 6, 6.5, 7, 8]), r.randint(12, 90) * 10, r.randint(140, 210) / 100
    return (f"A car uses {fmt(use)} litres of fuel per 100 km. Fuel costs {fmt(price)} {_money(r)} per litre. "
            f"What does a {dist} km trip cost in fuel?", f"{use * dist / 100 * price:.2f}")


def t_probability(r: random.Random) -> Problem:
    form = r.randrange(3)
    if form == 0:
        red, blue, green = r.randint(2, 9), r.randint(2, 9), r.randint(1, 6)
        return (f"A bag holds {red} red, {blue} blue and {green} green marbles. One is drawn at random. What is the "
                f"probability that it is not blue?", frac(Fraction(red + green, red + blue + green)))
    if form == 1:
        s = r.randint(4, 10)
        ways = sum(1 for i in range(1, 7) for j in range(1, 7) if i + j == s)
        return f"Two fair dice are rolled. What is the probability that the total is {s}?", frac(Fraction(ways, 36))
    k = r.randint(2, 5)
    return f"A fair coin is tossed {k} times. What is the chance of getting heads every time?", frac(Fraction(1, 2**k))


def t_sequence(r: random.Random) -> Problem:
    a, d, n = r.randint(-5, 20), r.randint(2, 9), r.randint(12, 60)
    terms = ", ".join(str(a + i * d) for i in range(4))
    if r.random() < 0.5:
        return (f"The sequence {terms}, ... continues in the same way. What is its {_ordinal(n)} term?",
                fmt(a + (n - 1) * d))
    return f"Find the sum of the first {n} terms of the sequence {terms}, ...", fmt(n * (2 * a + (n - 1) * d) // 2)


def t_powers(r: random.Random) -> Problem:
    form = r.randrange(3)
    if form == 0:
        s = r.randint(11, 40)
        return f"What is the square root of {s * s}? Explain how you can check it.", fmt(s)
    if form == 1:
        b, e = r.randint(2, 9), r.randint(3, 6)
        return f"Calculate {b} to the power of {e}.", fmt(b**e)
    a, b = r.randint(2, 5), r.randint(2, 5)
    return f"Simplify 2^{a} × 2^{b} ÷ 2^{min(a, b)} and give the value.", fmt(2 ** max(a, b))


def t_lcm(r: random.Random) -> Problem:
    a, b = r.sample([6, 8, 9, 10, 12, 14, 15, 18, 20, 24, 25, 30], 2)
    h = r.randint(6, 9)
    lcm = a * b // math.gcd(a, b)
    return (f"Bus A leaves the depot every {a} minutes and bus B every {b} minutes. Both leave together at "
            f"{h}:00. After how many minutes do they next leave together?", fmt(lcm))


def t_gcd(r: random.Random) -> Problem:
    g = r.randint(3, 15)
    a, b = g * r.randint(3, 12), g * r.randint(3, 12)
    while math.gcd(a, b) != g:
        b += g
    return (f"A teacher has {a} pencils and {b} erasers and wants identical packs with nothing left over. What is "
            f"the largest number of packs she can make?", fmt(g))


def t_fencing(r: random.Random) -> Problem:
    a, b, cost = r.randint(6, 40), r.randint(6, 40), r.randint(8, 30)
    gate = r.choice([1, 2, 3])
    return (f"A field is {a} m by {b} m. Fencing costs {cost} {_money(r)} per metre, and a {gate} m gap is left "
            f"for a gate. What does the fence cost?", fmt((2 * (a + b) - gate) * cost))


def t_paint(r: random.Random) -> Problem:
    w, h, cover, coats = r.randint(3, 8), r.choice([2.4, 2.5, 2.6, 3]), r.choice([8, 10, 12]), r.choice([1, 2])
    walls = 4
    area = 2 * (w + w + 1) * h
    tins = math.ceil(area * coats / (cover * 2.5))
    return (f"A room is {w} m by {w + 1} m with walls {fmt(h)} m high. A 2.5 litre tin covers {cover} square metres "
            f"per litre. How many tins are needed for {coats} coat{'s' if coats > 1 else ''} on all {walls} walls, "
            f"ignoring doors and windows?", fmt(tins))


def t_savings(r: random.Random) -> Problem:
    goal, have, week = r.randint(20, 150) * 10, r.randint(1, 15) * 10, r.randint(3, 12) * 5
    weeks = math.ceil((goal - have) / week)
    thing = r.choice(["a new laptop", "a bicycle", "a weekend trip", "concert tickets", "a guitar"])
    return (f"{_name(r)} wants {thing} costing {goal} {_money(r)}, already has {have} and saves {week} a week. How "
            f"many weeks until there is enough?", fmt(weeks))


def t_exchange(r: random.Random) -> Problem:
    rate = r.choice([Fraction(108, 100), Fraction(117, 100), Fraction(86, 100), Fraction(92, 100), Fraction(125, 100)])
    amount = r.randint(4, 90) * 25
    fee = r.choice([0, 1, 2, 3])
    a, b = r.sample(["euros", "dollars", "pounds", "Swiss francs"], 2)
    fee_s = f" The exchange office keeps a {fee}% fee on the amount changed." if fee else ""
    return (f"1 {a[:-1] if a.endswith('s') else a} buys {fmt(rate)} {b}. How many {b} do you get for {amount} {a}?"
            f"{fee_s}", fmt(amount * rate * (100 - fee) / 100))


def t_population(r: random.Random) -> Problem:
    pop, rate, years = r.randint(10, 90) * 1000, r.choice([2, 3, 5, 8, 10]), r.randint(2, 3)
    town = r.choice(["A town", "A village", "A bacterial culture in a lab", "A colony of seabirds"])
    return (f"{town} has {pop:,} members and grows by {rate}% a year. About how many will there be in {years} "
            f"years?", fmt(round(pop * (1 + rate / 100) ** years)))


def t_quadratic(r: random.Random) -> Problem:
    p, q = r.randint(-9, 9), r.randint(-9, 9)
    while p == q:
        q += 1
    b, c = -(p + q), p * q
    bs = f"+ {b}x" if b > 0 else (f"− {-b}x" if b < 0 else "")
    cs = f"+ {c}" if c > 0 else (f"− {-c}" if c < 0 else "")
    return f"Solve x² {bs} {cs} = 0 by factoring.".replace("  ", " "), f"x = {min(p, q)} or x = {max(p, q)}"


def t_consecutive(r: random.Random) -> Problem:
    k, start = r.choice([3, 4, 5]), r.randint(5, 120)
    total = sum(range(start, start + k))
    kind = "consecutive whole numbers"
    if r.random() < 0.5:
        total = sum(range(start * 2, start * 2 + 2 * k, 2))
        kind = "consecutive even numbers"
        start *= 2
    return f"The sum of {k} {kind} is {total}. What are the numbers?", fmt(start)


def t_budget(r: random.Random) -> Problem:
    income = r.randint(15, 60) * 100
    rent, food, save = r.choice([30, 35, 40]), r.choice([10, 15, 20]), r.choice([10, 15, 20])
    return (f"Out of a monthly income of {income} {_money(r)}, {rent}% goes on rent, {food}% on food and {save}% "
            f"into savings. How much is left for everything else?", fmt(income * (100 - rent - food - save) / 100))


def t_map_scale(r: random.Random) -> Problem:
    scale = r.choice([25000, 50000, 100000, 200000])
    cm = r.randint(3, 30) / 2
    return (f"On a map with a scale of 1:{scale:,}, two villages are {fmt(cm)} cm apart. What is the real distance "
            f"in kilometres?", fmt(Fraction(str(cm)) * scale / 100000))


def t_reading(r: random.Random) -> Problem:
    pages, per_day, done = r.randint(180, 900), r.randint(12, 45), r.randint(10, 90)
    return (f"A novel has {pages} pages. {_name(r)} has read {done} pages and reads {per_day} pages a day from now "
            f"on. How many more days until the book is finished?", fmt(math.ceil((pages - done) / per_day)))


def t_mixture(r: random.Random) -> Problem:
    a, pa, b, pb = r.randint(2, 10), r.choice([10, 20, 30]), r.randint(2, 10), r.choice([40, 50, 60])
    conc = Fraction(a * pa + b * pb, a + b)
    return (f"{a} litres of a {pa}% juice drink are mixed with {b} litres of a {pb}% juice drink. What percentage "
            f"of the mixture is juice?", fmt(conc) + "%")


def t_tiles(r: random.Random) -> Problem:
    w, length, tile = r.randint(2, 6), r.randint(3, 8), r.choice([20, 25, 30, 40, 50])
    n = math.ceil(w * 100 / tile) * math.ceil(length * 100 / tile)
    return (f"How many square tiles of side {tile} cm are needed to cover a floor {w} m wide and {length} m long? "
            f"Count a cut tile as a whole one.", fmt(n))


MATH_TEMPLATES: dict[str, Callable[[random.Random], Problem]] = {
    name[2:].replace("_", "-"): fn for name, fn in sorted(globals().items()) if name.startswith("t_") and callable(fn)
}

_WRAPPERS = (
    "Solve step by step: {p}",
    "{p} Show your working.",
    "Work through this problem step by step.\n\n{p}",
    "{p} Explain each step of the calculation.",
    "Please solve the following and explain how you got the answer: {p}",
    "Math problem: {p}\nShow the steps.",
    "{p} Think it through step by step, then give the final answer.",
    "Can you help me with this homework question? {p}",
    "{p} Walk me through the reasoning.",
    "Here is a question from a practice sheet: {p} How do I solve it?",
)


def math_problem(rng: random.Random, template: str | None = None) -> MathProblem:
    """One wrapped problem of ``template`` (random when None) whose answer is not written in it."""
    name = template or rng.choice(sorted(MATH_TEMPLATES))
    fn = MATH_TEMPLATES[name]
    for _ in range(50):
        text, answer = fn(rng)
        first = _NUMBER.search(answer.replace(",", ""))
        if answer in text or (first and first.group(0) in numbers_in(text)):
            continue
        return MathProblem(name, rng.choice(_WRAPPERS).format(p=text), answer)
    raise RuntimeError(f"math template {name!r} keeps writing its answer into the problem")
