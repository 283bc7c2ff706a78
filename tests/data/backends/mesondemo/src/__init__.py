from rfmeson._rfmeson import mul, where

__all__ = ["mul", "where"]
