# One image for every Vendue component: `docker run IMAGE bbs|auctioneer|rep ...` (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The source is only needed to build the wheel; the installed package is all that stays. Every dependency
# at the version constraints.txt pins, so two builds of one commit are the same image (constraints.txt
# says how to regenerate it). The base install only: no simulator report (plotly), no test tools.
COPY . /tmp/vendue-src
RUN pip install --constraint /tmp/vendue-src/constraints.txt /tmp/vendue-src && rm -rf /tmp/vendue-src

# Non-root: the BBS's SQLite file (when not on PostgreSQL) and the rep's container directories live in
# /var/lib/vendue, the one place this user can write.
RUN useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin vendue \
    && install -d -o vendue -g vendue /var/lib/vendue
USER vendue
WORKDIR /var/lib/vendue
ENV VENDUE_DATA_DIR=/var/lib/vendue

# In a container every component must listen beyond loopback; compose publishes only what it means to.
ENV VENDUE_LISTEN=0.0.0.0

ENTRYPOINT ["vendue"]
CMD ["--help"]
