"""The Potjans & Diesmann (2014) cortical microcircuit.

``params`` holds the published model's numbers (as in NEST 3's PyNEST
example), ``nest_reference`` builds and runs the same scaled network in NEST
for side-by-side checks.
"""
