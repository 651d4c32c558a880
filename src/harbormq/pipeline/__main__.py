"""``python -m harbormq.pipeline JOB ...``; also the file to hand to spark-submit:

    spark-submit --master spark://HOST:7077 --py-files harbormq.zip \
        "$(python -c 'import harbormq.pipeline.__main__ as m; print(m.__file__)')" rebuild ...

(absolute imports, so it also runs as a plain script)."""

import sys

from harbormq.pipeline.cli import main

sys.exit(main())
