// Names the documentation's Swift snippets take for granted: the reader's own
// types and functions, declared here once so that each snippet stays short.
// Only what a snippet uses without declaring it belongs here; a snippet that
// declares a name of its own shadows these.
import Foundation
import Sluice

// MARK: - An app's documents

struct Document: Sendable {
    var id = UUID()
    var text = ""
}

final class DocumentStore: Sendable {
    func save(_ document: Document, id: UUID) {}
}

let store = DocumentStore()
let draft = Document()

// MARK: - A server's requests

struct Request: Sendable {
    var apiKey = "key-1"
    var path = "/"
}

struct Response: Sendable {
    var status = 200
    var headers: [(name: String, value: String)] = []
}

let request = Request()

@discardableResult
func handle(_ request: Request) -> Response { Response() }

// MARK: - Events, searches, uploads

struct Event: Sendable {}
typealias UserID = Int

let event = Event()
let user: UserID = 42
let tabID = 1

func upload(_ events: [Event], for user: UserID) async {}
func runSearch(_ query: String, in tab: Int) {}
func showSpinner(until: LimiterInstant) {}
func search(_ text: String) -> [String] { [text] }

// MARK: - A download

struct Chunk: Sendable {
    var offset = 0
}

let download = AsyncStream<Chunk> { $0.finish() }

// MARK: - Webhooks

func sendWebhook(document: String, revision: String, generation: UInt64) async throws {}
func sendWebhook(document: String, revision: Int, generation: UInt64) async throws {}
