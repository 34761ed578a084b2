from elmo_plugin.predictors.bilm import ElmoBiLmPredictor

__all__ = ["ElmoBiLmPredictor"]
