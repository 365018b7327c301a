def fibonacci(n: int) -> int:
    """Return the n-th Fibonacci number (fibonacci(0) == 0, fibonacci(1) == 1)."""
    if n < 2:
        return n
    
