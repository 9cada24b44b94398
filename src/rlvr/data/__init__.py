"""Data components: produce disjoint train and held-out eval splits as ``datasets.Dataset``.

Every split has the columns ``question`` (raw task text), ``answer`` (gold answer),
``task`` (task name), ``entry`` (JSON of the entry the verifier needs: a reasoning-gym
entry, or a file row with the checker it names) and ``prompt`` (chat messages built by
the shared PromptTemplate).

The components: ``reasoning_gym`` (any task by name), ``files`` (file and ``datasets`` sources, a row
turned into a question by ``processors``), ``mixture`` (several tasks by weight) and ``curriculum``.
``base`` holds their contract, ``identity`` the split by content, ``references`` which training data
has reference answers, ``working`` an arithmetic answer's step-by-step working (SFT's worked target).
"""

from rlvr.data.base import DataComponent, TaskData
from rlvr.data.curriculum import CurriculumData
from rlvr.data.files import FileData
from rlvr.data.mixture import MixtureData
from rlvr.data.reasoning_gym import ReasoningGymData

__all__ = ["CurriculumData", "DataComponent", "FileData", "MixtureData", "ReasoningGymData", "TaskData"]
