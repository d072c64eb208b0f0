"""LLM usage in money: the price table (`prices.py`), the cost of stored usage (`costs.py`) and
the monthly budget's watch (`monthly_budget.py`)."""
